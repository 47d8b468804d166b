"""The codec ladder: fused feature rows compressed only as much as a congested link needs.

A row is ``VISUAL_DIM + SEMANTIC_DIM`` float32 values (two L2-normalised spaces, visual
first). Each rung encodes an ``(n, D)`` float32 matrix into an :class:`Encoded` payload and
decodes it back to ``(n, D)`` float32, which is what the shard stores. Least lossy first:

======  =====  =========  ===============================================================
codec   level  bytes/row  error
======  =====  =========  ===============================================================
fp32    0      6656       none: bit-identical
fp16    1      3328       ``|x - x'| <= 2**-11 |x|`` (normal), ``<= 2**-25`` (subnormal)
int8    2      1672       ``|x - x'| <= s/2 + 127 |s' - s|`` (< 0.65 s on real rows),
                          ``s = max|x_space| / 127`` per row per space
sparse  3      827 (*)    0 off the shared mask; int8 on it (see ``_Sparse``)
pq      4      360 (*)    codebook quantization error; no per-element bound
======  =====  =========  ===============================================================

(*) with the :meth:`SharedTables.train` defaults: ``keep=(0.4, 0.8)`` (visual, semantic),
``pq_dims_per_sub=(8, 2)``.

Spaces are coded separately wherever it matters (a scale, a mask, a quantizer per space),
so the 384-d semantic space is never drowned by the 1280-d visual one.

Norms: int8, sparse and pq decode each space to the original's L2 norm (an error of ~1e-4
in a row's norm reorders the near-tied frames of one scene); fp16 stays a plain cast.
Measured recall per codec: docs/benchmarks.md, "The codecs, measured".

``sparse`` and ``pq`` need :class:`SharedTables` (``comm/tables.py``), known to every node; a
payload carries the tables' version and a node holding other tables refuses it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import faiss
import numpy as np

from vifusion.comm._layout import _D, _FULL, _PQ_BITS, _SPACE_DIMS, _SPACE_LO, _rows, _space_absmax
from vifusion.comm.tables import SharedTables

_FP16_MAX = 65504.0


@dataclass(frozen=True)
class Encoded:
    """One encoded feature matrix: what travels.

    ``version`` is "" for the stateless codecs (fp32, fp16, int8) and the shared tables'
    version for ``sparse`` / ``pq``. ``arrays`` are C-contiguous numpy arrays (they pickle
    without copies through Ray).
    """

    codec: str
    version: str
    rows: int
    arrays: tuple[np.ndarray, ...]

    @property
    def nbytes(self) -> int:
        """Bytes on the wire: the payload arrays' bytes (the few header fields aside)."""
        return sum(int(a.nbytes) for a in self.arrays)


class Codec(ABC):
    """One rung of the ladder: ``(n, D)`` float32 -> :class:`Encoded` -> ``(n, D)`` float32.

    ``bytes_per_row`` is exact: ``encode(x).nbytes == bytes_per_row * len(x)``, so a policy
    can tell whether a batch fits a link's budget before encoding it. ``decode`` returns a
    new, writable float32 array. Lossy codecs reject non-finite input (ValueError).
    """

    name: str
    level: int  # position on the ladder, 0 = fp32
    lossless: bool
    bytes_per_row: int
    version: str = ""  # the shared tables' version for table codecs

    @abstractmethod
    def encode(self, x: np.ndarray) -> Encoded: ...

    @abstractmethod
    def decode(self, e: Encoded) -> np.ndarray: ...

    def _payload(
        self, e: Encoded, shapes: tuple[tuple[tuple[int, ...], type], ...]
    ) -> tuple[np.ndarray, ...]:
        """``e``'s arrays, checked against this codec and the expected (shape, dtype)s."""
        if e.codec != self.name or e.version != self.version:
            raise ValueError(
                f"codec {e.codec} version {e.version or '-'} given to codec {self.name} "
                f"version {self.version or '-'}"
            )
        if len(e.arrays) != len(shapes) or any(
            a.shape != s or a.dtype != t for a, (s, t) in zip(e.arrays, shapes)
        ):
            got = [(a.shape, str(a.dtype)) for a in e.arrays]
            raise ValueError(f"malformed {self.name} payload for {e.rows} rows: {got}")
        return e.arrays

    def __repr__(self) -> str:
        v = f" {self.version}" if self.version else ""
        return f"<codec {self.name}{v} level={self.level} {self.bytes_per_row} B/row>"


def _space_norms(x: np.ndarray, bounds: tuple[tuple[int, int], ...]) -> np.ndarray:
    """(n, len(bounds)) float32 L2 norm per row over each column range."""
    out = np.empty((len(x), len(bounds)), np.float32)
    for i, (lo, hi) in enumerate(bounds):
        out[:, i] = np.sqrt(np.square(x[:, lo:hi]).sum(axis=1))  # pairwise sums: accurate
    return out


def _int8_quantize(
    x: np.ndarray, bounds: tuple[tuple[int, int], ...], norms: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8, one scale per row per column range: (q, scales (n, 2) float32).

    ``q = round(x / s)`` with ``s = max|x| / 127``; the scale sent is ``norms / ||q||``, not
    ``s``, so the decoded range has exactly the given norm (the original's): frames of one
    scene score within ~1e-4 of each other, and a norm error of that size reorders them
    (see the module doc)."""
    amax = _space_absmax(x, bounds)
    # multiply by the inverse (cheaper than a divide); all-zero rows get 0, not a 0/0
    inv = np.divide(np.float32(127), amax, out=np.zeros_like(amax), where=amax > 0)
    y = np.empty(x.shape, np.float32)
    for i, (lo, hi) in enumerate(bounds):
        np.multiply(x[:, lo:hi], inv[:, i : i + 1], out=y[:, lo:hi])
    np.rint(y, out=y)
    np.clip(y, -127, 127, out=y)  # |y| <= 127 (1 + eps) already: a guard, not a clamp
    qnorm = _space_norms(y, bounds)
    scales = np.divide(norms, qnorm, out=np.zeros_like(qnorm), where=qnorm > 0)
    return y.astype(np.int8), scales


def _int8_dequantize(
    q: np.ndarray, scales: np.ndarray, bounds: tuple[tuple[int, int], ...]
) -> np.ndarray:
    out = q.astype(np.float32)
    for i, (lo, hi) in enumerate(bounds):
        out[:, lo:hi] *= scales[:, i : i + 1]
    return out


class _Fp32(Codec):
    """Exact: the payload is the float32 matrix itself (shared with the caller's array when
    it is already C-contiguous float32: do not mutate it until sent)."""

    name, level, lossless, bytes_per_row = "fp32", 0, True, 4 * _D

    def encode(self, x: np.ndarray) -> Encoded:
        x = _rows(x)
        return Encoded(self.name, "", len(x), (x,))

    def decode(self, e: Encoded) -> np.ndarray:
        (x,) = self._payload(e, (((e.rows, _D), np.float32),))
        return x.copy()  # a Ray-delivered array is read-only; the shard gets its own


class _Fp16(Codec):
    """Plain cast to float16. Error: ``|x - x'| <= 2**-11 |x|`` for normal values
    (``|x| >= 2**-14``), ``<= 2**-25`` absolute below that. ``|x| >= 65520`` is a ValueError."""

    name, level, lossless, bytes_per_row = "fp16", 1, False, 2 * _D

    def encode(self, x: np.ndarray) -> Encoded:
        x = _rows(x)
        if len(x) and not float(np.abs(x).max()) <= _FP16_MAX:  # "not <=" also catches NaN
            raise ValueError("features hold NaN, inf or values beyond float16's range")
        return Encoded(self.name, "", len(x), (x.astype(np.float16),))

    def decode(self, e: Encoded) -> np.ndarray:
        (h,) = self._payload(e, (((e.rows, _D), np.float16),))
        return h.astype(np.float32)


class _Int8(Codec):
    """Per row per space: ``q = round(x / s)`` in [-127, 127] with ``s = max|x| / 127``; payload
    q (int8, n x D) + one float32 scale per row per space (n x 2). The scale sent, ``s'``, is
    chosen so each decoded space keeps the original's L2 norm (see ``_int8_quantize``).
    Error: ``|x - x'| <= s/2 + 127 |s' - s|``; on real unit rows ``|s'/s - 1| < 3e-3``, and
    ``|x - x'| <= 0.62 s`` measured. An all-zero space decodes to exact zeros."""

    name, level, lossless, bytes_per_row = "int8", 2, False, _D + 4 * len(_SPACE_DIMS)

    def encode(self, x: np.ndarray) -> Encoded:
        x = _rows(x)
        q, scales = _int8_quantize(x, _FULL, _space_norms(x, _FULL))
        return Encoded(self.name, "", len(x), (q, scales))

    def decode(self, e: Encoded) -> np.ndarray:
        q, scales = self._payload(e, (((e.rows, _D), np.int8), ((e.rows, 2), np.float32)))
        return _int8_dequantize(q, scales, _FULL)


# -- table codecs -------------------------------------------------------------------------


class _Sparse(Codec):
    """Shared-mask sparse (PacTrain-style): per space only the mask's dims travel, as int8
    (as in ``int8``, scale over the kept dims); decode puts them back and zeros elsewhere.
    Every sender uses the same mask, so decoded rows share one layout. The scale sent makes
    each decoded space keep the original's *full* norm (what it lost off the mask is spread
    over the kept dims; for unit rows this is re-normalising, which ranking needs).
    Error: off the mask ``x' = 0`` exactly; on it ``x' = q s'`` with ``|x - q s| <= s/2``,
    ``s = max|kept x| / 127``, and ``s'/s = ||x|| / ||q s||``."""

    name, level, lossless = "sparse", 3, False

    def __init__(self, tables: SharedTables) -> None:
        self.version = tables.version
        # kept columns as positions in the fused row; the kept values travel packed
        self._cols = np.concatenate(
            [m.astype(np.intp) + lo for m, lo in zip(tables.masks, _SPACE_LO)]
        )
        kv = len(tables.masks[0])
        self._bounds = ((0, kv), (kv, len(self._cols)))
        self.bytes_per_row = len(self._cols) + 4 * len(_SPACE_DIMS)

    def encode(self, x: np.ndarray) -> Encoded:
        x = _rows(x)
        _space_absmax(x, _FULL)  # NaN/inf anywhere is an error, even off the mask
        q, scales = _int8_quantize(x[:, self._cols], self._bounds, _space_norms(x, _FULL))
        return Encoded(self.name, self.version, len(x), (q, scales))

    def decode(self, e: Encoded) -> np.ndarray:
        q, scales = self._payload(
            e, (((e.rows, len(self._cols)), np.int8), ((e.rows, 2), np.float32))
        )
        out = np.zeros((e.rows, _D), np.float32)
        out[:, self._cols] = _int8_dequantize(q, scales, self._bounds)
        return out


class _PQ(Codec):
    """Product quantization per space: each run of ``dims_per_sub`` consecutive dims becomes
    the 1-byte index of its nearest of 256 shared centroids, plus the space's L2 norm
    (float32); decode concatenates the centroids and rescales each space to that norm (for
    the reason ``sparse`` does). No per-element bound: the error is the codebooks'
    quantization error on rows like the training sample."""

    name, level, lossless = "pq", 4, False

    def __init__(self, tables: SharedTables) -> None:
        self.version = tables.version
        self._centroids = tables.pq
        self._m = tuple(c.shape[0] for c in tables.pq)
        self.bytes_per_row = sum(self._m) + 4 * len(_SPACE_DIMS)
        self._quantizers: tuple[faiss.ProductQuantizer, ...] | None = None

    def _faiss(self) -> tuple[faiss.ProductQuantizer, ...]:
        # built on first use (and again after unpickling: SWIG objects do not pickle)
        if self._quantizers is None:
            qs = []
            for d, c in zip(_SPACE_DIMS, self._centroids):
                q = faiss.ProductQuantizer(d, c.shape[0], _PQ_BITS)
                faiss.copy_array_to_vector(c.ravel(), q.centroids)
                qs.append(q)
            self._quantizers = tuple(qs)
        return self._quantizers

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_quantizers": None}

    def encode(self, x: np.ndarray) -> Encoded:
        x = _rows(x)
        _space_absmax(x, _FULL)
        codes = np.empty((len(x), sum(self._m)), np.uint8)
        if len(x):
            c0 = 0
            for q, lo, d, m in zip(self._faiss(), _SPACE_LO, _SPACE_DIMS, self._m):
                codes[:, c0 : c0 + m] = q.compute_codes(np.ascontiguousarray(x[:, lo : lo + d]))
                c0 += m
        return Encoded(self.name, self.version, len(x), (codes, _space_norms(x, _FULL)))

    def decode(self, e: Encoded) -> np.ndarray:
        codes, norms = self._payload(
            e, (((e.rows, sum(self._m)), np.uint8), ((e.rows, 2), np.float32))
        )
        out = np.empty((e.rows, _D), np.float32)
        c0 = 0
        for c, lo, d, m in zip(self._centroids, _SPACE_LO, _SPACE_DIMS, self._m):
            # centroid lookup: (n, M) codes -> (n, M, dsub) -> (n, d)
            out[:, lo : lo + d] = c[np.arange(m), codes[:, c0 : c0 + m]].reshape(e.rows, d)
            c0 += m
        rnorms = _space_norms(out, _FULL)
        gain = np.divide(norms, rnorms, out=np.zeros_like(rnorms), where=rnorms > 0)
        for i, (lo, hi) in enumerate(_FULL):
            out[:, lo:hi] *= gain[:, i : i + 1]
        return out


# -- the ladder ---------------------------------------------------------------------------


class Ladder:
    """The codecs in ladder order, least lossy (and largest) first: fp32, fp16, int8, and
    with shared tables sparse and pq. Without tables a node can neither send nor receive the
    table codecs."""

    def __init__(self, tables: SharedTables | None = None) -> None:
        codecs: list[Codec] = [_Fp32(), _Fp16(), _Int8()]
        if tables is not None:
            codecs += [_Sparse(tables), _PQ(tables)]
        self.tables = tables
        self.codecs: tuple[Codec, ...] = tuple(codecs)
        for i, c in enumerate(self.codecs):
            if c.level != i or (i and c.bytes_per_row >= self.codecs[i - 1].bytes_per_row):
                raise ValueError(
                    f"ladder out of order at {c!r}: each rung must be smaller than the last"
                )
        self._by_name = {c.name: c for c in self.codecs}

    def get(self, name: str) -> Codec:
        """The codec called ``name``; ValueError if this ladder has none."""
        try:
            return self._by_name[name]
        except KeyError:
            raise ValueError(
                f"unknown codec {name!r}: this ladder has {', '.join(self._by_name)}"
            ) from None

    def decode(self, e: Encoded) -> np.ndarray:
        """Decode with the codec ``e`` names; ValueError for a codec or tables version this
        node does not hold."""
        codec = self._by_name.get(e.codec)
        if codec is None:
            if e.codec in (_Sparse.name, _PQ.name):
                raise ValueError(
                    f"codec {e.codec} version {e.version} unknown here: "
                    "this node has no shared tables"
                )
            raise ValueError(
                f"unknown codec {e.codec!r}: this ladder has {', '.join(self._by_name)}"
            )
        if e.version != codec.version:
            raise ValueError(
                f"codec {e.codec} version {e.version or '-'} unknown here: "
                f"this node has {codec.version or '-'}"
            )
        return codec.decode(e)


def recall_at_k(
    ladder: Ladder, rows: np.ndarray, k: int = 10, queries: int = 100
) -> dict[str, float]:
    """How well each codec of ``ladder`` keeps search results on real ``rows`` (held out from
    the tables' training): per codec, the frame-level recall@k of the decoded rows against the
    exact ones, the worse of the two spaces; the first ``queries`` rows are the queries.
    Brute force in numpy: meant for a few thousand rows."""
    x = _rows(rows)
    q = x[:queries]
    out = {}
    for codec in ladder.codecs:
        y = codec.decode(codec.encode(x))
        worst = 1.0
        for lo, d in zip(_SPACE_LO, _SPACE_DIMS, strict=True):
            exact = np.argsort(-(q[:, lo : lo + d] @ x[:, lo : lo + d].T), axis=1)[:, :k]
            got = np.argsort(-(q[:, lo : lo + d] @ y[:, lo : lo + d].T), axis=1)[:, :k]
            hits = [len(set(a) & set(b)) / k for a, b in zip(exact, got, strict=True)]
            worst = min(worst, float(np.mean(hits)))
        out[codec.name] = worst
    return out
