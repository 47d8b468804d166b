"""One vector space of one shard, with its FAISS index type chosen by size.

Small: ``IDMap2,Flat`` (exact inner product), in chunks of bounded size (``_flat.py``).
Past ``exact_max`` vectors: ``IVF{nlist},{codec}`` trained from the shard's own vectors
(nlist ~ 2 sqrt(n), a power of two; codec ``SQfp16``, 2 bytes a dimension, or ``SQ8``, 1
byte), with a hash direct map so vectors can be removed and read back by id. Both types remove ids, so no tombstones are
needed. Vectors are L2-normalised: inner product is cosine similarity.

Past ``compress_min`` vectors: ``IVF{nlist},PQ{m}``, a compressed space (``m`` bytes a vector,
``pq_bytes`` by dimension), with no direct map (removal scans the lists); its exact vectors
live in the shard's vector file (``_vectors.py``), which the top ``k * refine`` candidates of
each search are re-scored from, and which ``reconstruct`` reads.

Limits: an SQ space stores its vectors in the codec (``reconstruct`` returns them decoded,
not the exact input); it is re-trained from those when its size calls for more lists
(about every 4x of growth). Not thread-safe: the shard serialises calls.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import faiss
import numpy as np

from vifusion._limits import within
from vifusion.index._flat import ChunkedFlat
from vifusion.index._vectors import VectorStore

FLAT = "IDMap2,Flat"
_REGROW = 2  # an IVF space is re-trained no sooner than at this many times its training size
_TRAIN_PER_LIST = 64  # training points per inverted list (k-means cost bound)
_TRAIN_MAX = 1 << 17  # and at most this many in all (k-means over 1280-d grows with both)
_FILL_PIECE = 1 << 16  # vectors read from the file and encoded at a time
_EXACT_SUBSET = 1 << 16  # a filter selecting at most this many vectors is searched exactly
# A search visits at least this share of a space's lists: a fixed count probes a shrinking
# share as lists grow with the space, and a query's neighbours spread over more of them.
_PROBE_SHARE = 32


CODECS = ("SQfp16", "SQ8")
_VISUAL_DIM = 1280


@dataclass(frozen=True)
class IndexPolicy:
    """How a space picks and searches its index: exact up to ``exact_max`` vectors, then
    IVF with ``codec`` vectors, visiting ``nprobe`` lists per search."""

    exact_max: int = 50_000  # vectors kept in an exact flat index
    nprobe: int = 32  # inverted lists an IVF search visits at least (``nprobe_for``)
    codec: str = "SQfp16"  # vectors in a trained index: one of CODECS
    compress_min: int = 0  # past this many vectors, IVF-PQ + re-ranking (0: never)
    pq_visual: int = 64  # PQ bytes a 1280-d vector
    pq_text: int = 64  # PQ bytes a 384-d vector
    refine: int = 100  # a compressed search re-scores k * refine candidates exactly

    def __post_init__(self) -> None:
        within("exact_max", self.exact_max, 0)
        within("nprobe", self.nprobe, 1)
        within("compress_min", self.compress_min, 0)
        within("refine", self.refine, 1)
        if self.codec not in CODECS:
            raise ValueError(f"unknown codec {self.codec!r}; expected one of {CODECS}")

    def factory_for(self, n: int, d: int = 0) -> str:
        """The FAISS factory string for a space of ``n`` vectors of dimension ``d``."""
        if n <= self.exact_max and not self.compresses(n):
            return FLAT
        nlist = 1 << max(6, min(16, round(math.log2(2 * math.sqrt(n)))))
        if self.compresses(n):
            return f"IVF{nlist},PQ{self.pq_visual if d == _VISUAL_DIM else self.pq_text}"
        return f"IVF{nlist},{self.codec}"

    def nprobe_for(self, nlist: int) -> int:
        """Lists a search of an IVF space of ``nlist`` lists visits: ``nprobe``, or a
        ``_PROBE_SHARE``-th of the lists where that is more."""
        return min(nlist, max(self.nprobe, nlist // _PROBE_SHARE))

    def compresses(self, n: int) -> bool:
        return 0 < self.compress_min < n


class SpaceIndex:
    """The vectors of one space, searchable, removable and readable by id."""

    def __init__(
        self,
        d: int,
        policy: IndexPolicy,
        factory: str = FLAT,
        index: faiss.Index | ChunkedFlat | None = None,
        trained_n: int = 0,
        store: VectorStore | None = None,
    ) -> None:
        self.d = d
        self.policy = policy
        self.factory = factory
        self.index = index if index is not None else ChunkedFlat(d)
        self.trained_n = trained_n
        self.store = store  # a compressed space's exact vectors
        self._ivf = None if self.is_flat else faiss.extract_index_ivf(self.index)
        self.nprobe = 0 if self._ivf is None else policy.nprobe_for(self._ivf.nlist)

    @classmethod
    def build(
        cls, d: int, policy: IndexPolicy, ids: np.ndarray, vectors: np.ndarray, seed: int = 0
    ) -> SpaceIndex:
        """A new uncompressed index (flat, or IVF with ``policy.codec``) of the type that
        suits ``len(ids)`` vectors, holding them."""
        factory = policy.factory_for(len(ids), d)
        if policy.compresses(len(ids)):
            raise ValueError("a compressed space is built from its vector file: build_compressed")
        if factory == FLAT:
            space = cls(d, policy)
        else:
            index = _trained(d, factory, len(ids), lambda take: vectors[take], seed)
            index.set_direct_map_type(faiss.DirectMap.Hashtable)
            space = cls(d, policy, factory, index, trained_n=len(ids))
        space.add(ids, vectors)
        return space

    @classmethod
    def build_compressed(
        cls,
        d: int,
        policy: IndexPolicy,
        ids: np.ndarray,
        rows: np.ndarray,
        store: VectorStore,
        seed: int = 0,
    ) -> SpaceIndex:
        """A compressed index of the vectors ``store`` holds at ``rows`` (``ids[i]``'s at
        ``rows[i]``): trained on a sample read from the file, then filled a piece at a
        time, so it holds the sample and one piece beside the codes, never the whole space
        as floats (at millions of vectors a shard, that copy ran machines out of memory)."""
        factory = policy.factory_for(len(ids), d)
        order = np.argsort(rows, kind="stable")  # one pass through the file, in its order
        ids, rows = ids[order], rows[order]
        index = _trained(d, factory, len(ids), lambda take: store.read_rows(rows[take]), seed)
        for at in range(0, len(ids), _FILL_PIECE):
            piece = slice(at, at + _FILL_PIECE)
            index.add_with_ids(
                store.read_rows(rows[piece], in_order=True), np.ascontiguousarray(ids[piece])
            )
        return cls(d, policy, factory, index, len(ids), store)

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    @property
    def is_flat(self) -> bool:
        return self.factory == FLAT

    @property
    def compressed(self) -> bool:
        return self.store is not None

    def memory_bytes(self) -> int:
        """Resident bytes of the index, counted from its sizes (cheap: monitoring reads it):
        codes and ids, coarse centroids and PQ codebooks, the SQ space's hash direct map
        (about 40 bytes an id), a compressed space's id -> row map. The vector file is on
        disk, paged in as read."""
        if self.is_flat:
            return self.ntotal * (4 * self.d + 8)
        ivf = self._ivf
        n = self.ntotal * (ivf.code_size + 8) + ivf.nlist * self.d * 4
        if self.store is None:
            return n + 40 * self.ntotal
        return n + 256 * self.d * 4 + self.store.ids.nbytes

    def needs_rebuild(self, codes: bool = True) -> bool:
        """Whether the index type no longer suits the size or the policy: a flat space grown
        past ``exact_max``, an IVF space grown at least ``_REGROW`` x since training into a
        size that calls for more inverted lists, or, with ``codes``, one whose vector codes
        are not the policy's (its codec or PQ size changed since it was trained: a restart
        re-trains it in the background, the old index serving meanwhile)."""
        n = self.ntotal
        if self.is_flat:
            return n > self.policy.exact_max or self.policy.compresses(n)
        if self.policy.compresses(n) and not self.compressed:
            return True
        wanted = self.policy.factory_for(n, self.d)
        if codes and wanted != FLAT and self.compressed == self.policy.compresses(n):
            if _codes(wanted) != _codes(self.factory):
                return True
        return n >= _REGROW * self.trained_n and wanted != self.factory

    def add(self, ids: np.ndarray, vectors: np.ndarray, stored: bool = False) -> None:
        """Add vectors under ids that are not present (the caller removes old ones first).
        A compressed space writes them to its vector file too, unless ``stored``."""
        if len(ids):
            ids = np.ascontiguousarray(ids, np.int64)
            if self.store is not None and not stored:
                self.store.append(ids, vectors)
            self.index.add_with_ids(np.ascontiguousarray(vectors, np.float32), ids)

    def remove(self, ids: np.ndarray) -> int:
        """Remove these ids (absent ones are ignored); return how many were removed."""
        ids = np.ascontiguousarray(ids, np.int64)
        if not len(ids):
            return 0
        # The hash direct map of an IVF index only removes by an explicit id array; a flat
        # IDMap2 tests every stored id against the selector, so it wants a hash set.
        # A compressed space has no direct map: its lists are scanned, testing each id too.
        sel = (
            faiss.IDSelectorBatch(ids)
            if self.is_flat or self.compressed
            else faiss.IDSelectorArray(len(ids), faiss.swig_ptr(ids))
        )
        return int(self.index.remove_ids(sel))

    def reconstruct(self, ids: np.ndarray) -> np.ndarray:
        """The stored vectors of these (present) ids, (n, d) float32."""
        ids = np.ascontiguousarray(ids, np.int64)
        if not len(ids):
            return np.zeros((0, self.d), np.float32)
        if self.store is not None:
            return self.store.read(ids)
        return self.index.reconstruct_batch(ids)

    def search(
        self, queries: np.ndarray, k: int, subset: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, ids) per query; with ``subset``, only among those ids, without
        losing top-k to the filter (small subsets are searched exactly)."""
        if self._ivf is not None:
            # FAISS shares a call's threads out by query, which leaves a lone query's lists
            # to one thread; it gets them all, split by list
            self._ivf.parallel_mode = 1 if len(queries) == 1 else 0
        if subset is None:
            if self.compressed:
                return self._refined(queries, k, self.nprobe)
            params = None if self.is_flat else faiss.SearchParametersIVF(nprobe=self.nprobe)
            return self.index.search(queries, k, params=params)
        if self.is_flat:
            return self.index.search(
                queries, k, params=faiss.SearchParameters(sel=faiss.IDSelectorBatch(subset))
            )
        if len(subset) <= _EXACT_SUBSET:
            scores, rows = faiss.knn(
                queries, self.reconstruct(subset), min(k, len(subset)), faiss.METRIC_INNER_PRODUCT
            )
            ids = np.where(rows >= 0, subset[np.maximum(rows, 0)], -1)
            if ids.shape[1] < k:  # pad as FAISS does where fewer than k exist
                pad = k - ids.shape[1]
                ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=-1)
                scores = np.pad(
                    scores, ((0, 0), (0, pad)), constant_values=-np.finfo(np.float32).max
                )
            return scores, ids
        # A large subset: IVF restricted to it, probing wider since the filter thins each list.
        if self.compressed:
            return self._refined(queries, k, 4 * self.nprobe, subset)
        params = faiss.SearchParametersIVF(
            nprobe=4 * self.nprobe, sel=faiss.IDSelectorBatch(subset)
        )
        return self.index.search(queries, k, params=params)

    def _refined(
        self, queries: np.ndarray, k: int, nprobe: int, subset: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k of a compressed space: the PQ index's top ``k * refine`` candidates,
        re-scored with their exact vectors from the vector file."""
        sel = None if subset is None else faiss.IDSelectorBatch(subset)
        params = faiss.SearchParametersIVF(nprobe=nprobe, sel=sel)
        _, cand = self.index.search(queries, k * self.policy.refine, params=params)
        scores = self.store.inner_products(queries, cand)
        best = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(scores, best, 1), np.take_along_axis(cand, best, 1)

    def serialize(self) -> list[np.ndarray]:
        """The index as FAISS blobs: one per chunk of a flat space, one for an IVF space."""
        if self.is_flat:
            return self.index.serialize()
        return [faiss.serialize_index(self.index)]

    @classmethod
    def deserialize(
        cls,
        blobs: list[np.ndarray],
        d: int,
        policy: IndexPolicy,
        factory: str,
        trained_n: int,
        store: VectorStore | None = None,
    ) -> SpaceIndex:
        if factory == FLAT:
            return cls(d, policy, factory, ChunkedFlat.deserialize(blobs, d), trained_n)
        if len(blobs) != 1:
            raise ValueError(f"an IVF index is one blob, got {len(blobs)}")
        index = faiss.deserialize_index(blobs[0])
        if index.d != d:
            raise ValueError(f"index has dim {index.d}, expected {d}")
        return cls(d, policy, factory, index, trained_n, store)

    def all_ids(self) -> np.ndarray:
        """Every stored id (order unspecified)."""
        if self.is_flat:
            return self.index.ids()
        invlists = faiss.extract_index_ivf(self.index).invlists
        parts = [
            faiss.rev_swig_ptr(invlists.get_ids(i), invlists.list_size(i)).copy()
            for i in range(invlists.nlist)
            if invlists.list_size(i)
        ]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _codes(factory: str) -> str:
    """The vector codes of an IVF factory string: ``SQ8`` of ``IVF1024,SQ8``."""
    return factory.split(",", 1)[1]


def _trained(
    d: int, factory: str, n: int, sample_of: Callable[[np.ndarray], np.ndarray], seed: int
) -> faiss.Index:
    """An empty IVF index of ``factory``, trained on a random sample of the ``n`` vectors
    (``sample_of(positions)`` reads them)."""
    index = faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT)
    ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
    take = min(n, ivf.nlist * _TRAIN_PER_LIST, _TRAIN_MAX)
    rng = np.random.default_rng(seed)
    positions = np.sort(rng.choice(n, take, replace=False)) if take < n else np.arange(n)
    ivf.cp.niter = 10
    ivf.cp.min_points_per_centroid = 1  # silence the "too few points" warning
    ivf.cp.max_points_per_centroid = _TRAIN_PER_LIST
    if isinstance(ivf, faiss.IndexIVFPQ):  # not a fast-scan index (benchmarks/pq_settings.py)
        # the factory turns on polysemous training, which took minutes (annealing the code
        # order for Hamming filtering, which search does not use)
        ivf.do_polysemous_training = False
    if "PQ" in factory:
        ivf.pq.cp.min_points_per_centroid = 1  # the sample is what there is
        ivf.pq.cp.niter = 10  # as the coarse quantizer's; the re-ranking is exact
    index.train(np.ascontiguousarray(sample_of(positions), np.float32))
    return index
