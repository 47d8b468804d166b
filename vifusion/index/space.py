"""One vector space of one shard, with its FAISS index type chosen by size.

Small: ``IDMap2,Flat`` (exact inner product), in chunks of bounded size (``_flat.py``).
Past ``exact_max`` vectors: ``IVF{nlist},{codec}`` trained from the shard's own vectors
(nlist ~ 2 sqrt(n), a power of two; codec ``SQfp16``, 2 bytes a dimension, or ``SQ8``, 1
byte), with a hash direct map so vectors can be removed and read back by id. Both types remove ids, so no tombstones are
needed. Vectors are L2-normalised: inner product is cosine similarity.

Limits: an IVF space stores its vectors in the codec (``reconstruct`` returns them decoded,
not the exact input); it is re-trained from those when its size calls for more lists
(about every 4x of growth). Not thread-safe: the shard serialises calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import faiss
import numpy as np

from vifusion._limits import within
from vifusion.index._flat import ChunkedFlat

FLAT = "IDMap2,Flat"
_REGROW = 2  # an IVF space is re-trained no sooner than at this many times its training size
_TRAIN_PER_LIST = 64  # training points per inverted list (k-means cost bound)
_EXACT_SUBSET = 1 << 16  # a filter selecting at most this many vectors is searched exactly


CODECS = ("SQfp16", "SQ8")


@dataclass(frozen=True)
class IndexPolicy:
    """How a space picks and searches its index: exact up to ``exact_max`` vectors, then
    IVF with ``codec`` vectors, visiting ``nprobe`` lists per search."""

    exact_max: int = 50_000  # vectors kept in an exact flat index
    nprobe: int = 32  # inverted lists an IVF search visits
    codec: str = "SQfp16"  # vectors in a trained index: one of CODECS

    def __post_init__(self) -> None:
        within("exact_max", self.exact_max, 0)
        within("nprobe", self.nprobe, 1)
        if self.codec not in CODECS:
            raise ValueError(f"unknown codec {self.codec!r}; expected one of {CODECS}")

    def factory_for(self, n: int) -> str:
        """The FAISS factory string for a space of ``n`` vectors."""
        if n <= self.exact_max:
            return FLAT
        nlist = 1 << max(6, min(16, round(math.log2(2 * math.sqrt(n)))))
        return f"IVF{nlist},{self.codec}"


class SpaceIndex:
    """The vectors of one space, searchable, removable and readable by id."""

    def __init__(
        self,
        d: int,
        policy: IndexPolicy,
        factory: str = FLAT,
        index: faiss.Index | ChunkedFlat | None = None,
        trained_n: int = 0,
    ) -> None:
        self.d = d
        self.policy = policy
        self.factory = factory
        self.index = index if index is not None else ChunkedFlat(d)
        self.trained_n = trained_n

    @classmethod
    def build(
        cls, d: int, policy: IndexPolicy, ids: np.ndarray, vectors: np.ndarray, seed: int = 0
    ) -> SpaceIndex:
        """A new index of the type that suits ``len(ids)`` vectors, holding them."""
        factory = policy.factory_for(len(ids))
        if factory == FLAT:
            space = cls(d, policy)
        else:
            index = faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT)
            nlist = faiss.extract_index_ivf(index).nlist
            rng = np.random.default_rng(seed)
            take = min(len(ids), nlist * _TRAIN_PER_LIST)
            sample = (
                vectors[np.sort(rng.choice(len(ids), take, replace=False))]
                if take < len(ids)
                else vectors
            )
            index.cp.niter = 10
            index.cp.min_points_per_centroid = 1  # silence the "too few points" warning
            index.cp.max_points_per_centroid = _TRAIN_PER_LIST
            index.train(np.ascontiguousarray(sample, np.float32))
            index.set_direct_map_type(faiss.DirectMap.Hashtable)
            space = cls(d, policy, factory, index, trained_n=len(ids))
        space.add(ids, vectors)
        return space

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    @property
    def is_flat(self) -> bool:
        return self.factory == FLAT

    def needs_rebuild(self) -> bool:
        """Whether the index type no longer suits the size: a flat space grown past
        ``exact_max``, or an IVF space grown at least ``_REGROW`` x since training into a
        size that calls for more inverted lists."""
        if self.is_flat:
            return self.ntotal > self.policy.exact_max
        return (
            self.ntotal >= _REGROW * self.trained_n
            and self.policy.factory_for(self.ntotal) != self.factory
        )

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add vectors under ids that are not present (the caller removes old ones first)."""
        if len(ids):
            self.index.add_with_ids(
                np.ascontiguousarray(vectors, np.float32), np.ascontiguousarray(ids, np.int64)
            )

    def remove(self, ids: np.ndarray) -> int:
        """Remove these ids (absent ones are ignored); return how many were removed."""
        ids = np.ascontiguousarray(ids, np.int64)
        if not len(ids):
            return 0
        # The hash direct map of an IVF index only removes by an explicit id array; a flat
        # IDMap2 tests every stored id against the selector, so it wants a hash set.
        sel = (
            faiss.IDSelectorBatch(ids)
            if self.is_flat
            else faiss.IDSelectorArray(len(ids), faiss.swig_ptr(ids))
        )
        return int(self.index.remove_ids(sel))

    def reconstruct(self, ids: np.ndarray) -> np.ndarray:
        """The stored vectors of these (present) ids, (n, d) float32."""
        ids = np.ascontiguousarray(ids, np.int64)
        if not len(ids):
            return np.zeros((0, self.d), np.float32)
        return self.index.reconstruct_batch(ids)

    def search(
        self, queries: np.ndarray, k: int, subset: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, ids) per query; with ``subset``, only among those ids, without
        losing top-k to the filter (small subsets are searched exactly)."""
        if subset is None:
            params = None if self.is_flat else faiss.SearchParametersIVF(nprobe=self.policy.nprobe)
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
        params = faiss.SearchParametersIVF(
            nprobe=4 * self.policy.nprobe, sel=faiss.IDSelectorBatch(subset)
        )
        return self.index.search(queries, k, params=params)

    def serialize(self) -> list[np.ndarray]:
        """The index as FAISS blobs: one per chunk of a flat space, one for an IVF space."""
        if self.is_flat:
            return self.index.serialize()
        return [faiss.serialize_index(self.index)]

    @classmethod
    def deserialize(
        cls, blobs: list[np.ndarray], d: int, policy: IndexPolicy, factory: str, trained_n: int
    ) -> SpaceIndex:
        if factory == FLAT:
            return cls(d, policy, factory, ChunkedFlat.deserialize(blobs, d), trained_n)
        if len(blobs) != 1:
            raise ValueError(f"an IVF index is one blob, got {len(blobs)}")
        index = faiss.deserialize_index(blobs[0])
        if index.d != d:
            raise ValueError(f"index has dim {index.d}, expected {d}")
        return cls(d, policy, factory, index, trained_n)

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
