"""The tables that ``sparse`` and ``pq`` need on every node: per space, a sparse mask and a
product quantizer's codebooks, trained once from real rows, versioned by content."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from vifusion._files import fsync_dir
from vifusion.comm._layout import (
    _FULL,
    _PQ_BITS,
    _PQ_KSUB,
    _SPACE_DIMS,
    _SPACE_LO,
    _rows,
    _space_absmax,
)


def _content_version(pq: tuple[np.ndarray, ...], masks: tuple[np.ndarray, ...]) -> str:
    """Short content hash: nodes holding the same tables agree, any difference shows."""
    h = hashlib.sha256(b"vifusion-codec-tables-1")
    for a in (*pq, *masks):
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:12]


def _per_space(v: Any) -> tuple[Any, Any]:
    """One value for both spaces, or a (visual, semantic) pair."""
    pair = tuple(v) if isinstance(v, (tuple, list)) else (v, v)
    if len(pair) != len(_SPACE_DIMS):
        raise ValueError(f"expected one value or one per space (visual, semantic), got {v!r}")
    return pair


def _keeps(keep: float | tuple[float, float]) -> tuple[float, float]:
    """The sparse keep ratio per space; ValueError outside (0, 1]."""
    keeps = _per_space(keep)
    if not all(0 < k <= 1 for k in keeps):
        raise ValueError(f"keep must be a fraction in (0, 1], got {keep}")
    return keeps


def _mask(xs: np.ndarray, keep: float) -> np.ndarray:
    """The sparse mask of one space: the ``keep`` share of its dims with the largest mean
    square over the sample ``xs`` (at least one), sorted int32 indices."""
    energy = np.einsum("ij,ij->j", xs, xs, dtype=np.float64)
    k = max(1, round(keep * xs.shape[1]))
    return np.sort(np.argsort(-energy, kind="stable")[:k]).astype(np.int32)


@dataclass(frozen=True, eq=False)
class SharedTables:
    """What every node must hold to use ``sparse`` and ``pq``: one version of

    - ``pq``: per space (visual, semantic), the product quantizer's centroids, float32
      ``(M, 256, dims_per_sub)`` (M sub-quantizers over consecutive dims, 8-bit codes);
    - ``masks``: per space, the sorted kept-dimension indices (int32, within the space).

    ``version`` is the content hash of both; the constructor checks it.
    """

    version: str
    pq: tuple[np.ndarray, np.ndarray]
    masks: tuple[np.ndarray, np.ndarray]

    def __post_init__(self) -> None:
        for d, c, m in zip(_SPACE_DIMS, self.pq, self.masks, strict=True):
            if (
                c.ndim != 3
                or c.shape[1] != _PQ_KSUB
                or c.shape[0] * c.shape[2] != d
                or c.dtype != np.float32
            ):
                raise ValueError(
                    f"pq centroids of shape {c.shape} ({c.dtype}) do not fit a {d}-d space"
                )
            if (
                m.ndim != 1
                or m.dtype != np.int32
                or not 0 < len(m) <= d
                or m[0] < 0
                or m[-1] >= d
                or (np.diff(m) <= 0).any()
            ):
                raise ValueError(
                    f"a mask must be sorted unique int32 indices within the {d}-d space"
                )
        if self.version != _content_version(self.pq, self.masks):
            raise ValueError(f"tables version {self.version} does not match their content")

    @classmethod
    def of(
        cls, pq: tuple[np.ndarray, np.ndarray], masks: tuple[np.ndarray, np.ndarray]
    ) -> SharedTables:
        """Tables from their arrays, versioned by content."""
        pq = tuple(np.ascontiguousarray(c, np.float32) for c in pq)
        masks = tuple(np.ascontiguousarray(m, np.int32) for m in masks)
        return cls(_content_version(pq, masks), pq, masks)

    @classmethod
    def train(
        cls,
        features: np.ndarray,
        *,
        keep: float | tuple[float, float] = (0.4, 0.8),
        pq_dims_per_sub: int | tuple[int, int] = (8, 2),
        seed: int = 0,
    ) -> SharedTables:
        """Train from a sample of real ``(n, D)`` rows (n >= 256; some thousands is plenty).

        Both parameters take one value for both spaces or a (visual, semantic) pair.
        ``keep``: fraction of a space's dims its sparse mask keeps, those with the largest
        mean square over the sample; sparse costs ``kept dims + 8`` bytes per row.
        ``pq_dims_per_sub``: dims per 8-bit sub-quantizer (must divide the space's dims: 2,
        4, 8, ...); pq costs ``sum(dims / pq_dims_per_sub) + 8`` bytes per row. The defaults
        (measured on real frames: docs/benchmarks.md, "The codecs, measured") give sparse 827 and pq 360 bytes per
        row. Deterministic for a given sample and seed. Takes ~15-25 s on one core for 4,096
        rows (faiss k-means, 352 sub-quantizers): train once, then :meth:`save`.
        """
        x = _rows(features)
        if len(x) < _PQ_KSUB:
            raise ValueError(f"training needs at least {_PQ_KSUB} rows, got {len(x)}")
        keeps = _keeps(keep)
        subs = _per_space(pq_dims_per_sub)
        if not all(isinstance(s, int) and s >= 2 and d % s == 0 for s, d in zip(subs, _SPACE_DIMS)):
            raise ValueError(
                f"pq_dims_per_sub {pq_dims_per_sub} must be >= 2 and divide {_SPACE_DIMS}"
            )
        _space_absmax(x, _FULL)  # NaN/inf check
        masks, pq = [], []
        for lo, d, kf, sub in zip(_SPACE_LO, _SPACE_DIMS, keeps, subs):
            xs = np.ascontiguousarray(x[:, lo : lo + d])
            masks.append(_mask(xs, kf))
            q = faiss.ProductQuantizer(d, d // sub, _PQ_BITS)
            q.cp.seed = seed
            q.cp.min_points_per_centroid = 1  # small samples are fine here; spare the warning
            q.train(xs)
            pq.append(faiss.vector_to_array(q.centroids).reshape(q.M, _PQ_KSUB, q.dsub))
        return cls.of(tuple(pq), tuple(masks))

    def with_keep(self, features: np.ndarray, keep: float | tuple[float, float]) -> SharedTables:
        """These tables with the sparse masks chosen again from ``features`` to keep ``keep``
        (as :meth:`train` chooses them), the pq codebooks as they are: a keep ratio tried
        without the seconds of k-means that training pq costs."""
        x = _rows(features)
        _space_absmax(x, _FULL)  # NaN/inf check
        masks = tuple(
            _mask(x[:, lo : lo + d], kf) for lo, d, kf in zip(_SPACE_LO, _SPACE_DIMS, _keeps(keep))
        )
        return SharedTables.of(self.pq, masks)

    def save(self, directory: Path) -> Path:
        """Write ``<directory>/tables-<version>.npz`` atomically (temp file, fsync, rename)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"tables-{self.version}.npz"
        tmp = directory / f".{path.name}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            np.savez(
                f,
                version=np.array(self.version),
                pq_visual=self.pq[0],
                pq_semantic=self.pq[1],
                mask_visual=self.masks[0],
                mask_semantic=self.masks[1],
            )
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(directory)
        return path

    @classmethod
    def load(cls, path: Path) -> SharedTables:
        """Read tables written by :meth:`save`; ValueError if the content does not match its
        recorded version (a corrupt or hand-edited file)."""
        with np.load(Path(path), allow_pickle=False) as z:
            return cls(
                str(z["version"]),
                (z["pq_visual"], z["pq_semantic"]),
                (z["mask_visual"], z["mask_semantic"]),
            )
