"""An exact inner-product index of vectors under ids, kept in FAISS chunks of bounded size.

One ``IDMap2,Flat`` stores its vectors in a ``std::vector``, which copies itself whole each
time it outgrows its capacity: at 115,000 and 230,000 vectors (both spaces) that stalled a
shard's writes and searches for 1.5 and 3.8 s on this 2-core machine while the fusion
benchmark streamed into it. Chunks of at most ``chunk`` vectors each copy only themselves;
a search visits every chunk and keeps the best k. Only the newest chunk takes adds, so a
loaded snapshot's chunks stay as they are, whatever their size.

What a growth costs here is mostly first touching the new memory (page faults), so the
stall is the size of the chunk's last doubling: adding 150,000 vectors in batches of 150,
the slowest add took 150 ms with chunks of 16,384 and 42 ms with chunks of 4,096 (4.6 and
4.8 s in all).

So the next chunk is made ahead, once the newest is half full, on another thread (FAISS
lets go of the GIL): its whole capacity allocated and touched once, and the adds that fill
it copy into memory already there. Growing by doubling touched 2.3 pages per page stored:
filling one 1280-d chunk in batches of 40 took 24 ms and 11,311 page faults, against
3 ms and none in a chunk made ahead (11 ms and 4,823 faults to make). At 1 Gbit page
faults (the kernel clearing new pages) were 36% of a shard's CPU, on the thread that
stores every batch before it is acknowledged. A chunk made ahead holds its capacity
before it takes a vector: about 27 MB for both spaces of a shard, once past the first
half-chunk.
"""

from __future__ import annotations

import threading

import faiss
import numpy as np

CHUNK = (
    1 << 12
)  # vectors per chunk: its growth copies (and first touches) at most ~14 MB of both spaces


class ChunkedFlat:
    """The subset of ``faiss.IndexIDMap2(IndexFlatIP)`` a ``SpaceIndex`` uses."""

    def __init__(self, d: int, parts: list[faiss.Index] | None = None, chunk: int = CHUNK) -> None:
        self.d = d
        self.chunk = chunk
        self._parts = parts or [_chunk(d)]
        self._next: _Ahead | None = None
        self._count_sealed()

    @property
    def ntotal(self) -> int:
        # Read several times per add: summing the chunks' counts in Python was a tenth of a
        # shard's time holding the GIL at 1 Gbit (150,000 vectors, 37 chunks).
        return self._sealed + int(self._parts[-1].ntotal)

    def _count_sealed(self) -> None:
        """Only the newest chunk takes adds: the others' count changes only where it is set."""
        self._sealed = sum(int(p.ntotal) for p in self._parts[:-1])

    def add_with_ids(self, x: np.ndarray, ids: np.ndarray) -> None:
        at = 0
        while at < len(ids):
            if self._parts[-1].ntotal >= self.chunk:
                ahead, self._next = self._next, None
                self._parts.append(ahead.get() if ahead else _chunk(self.d))
                self._count_sealed()
            n = min(self.chunk - int(self._parts[-1].ntotal), len(ids) - at)
            self._parts[-1].add_with_ids(x[at : at + n], ids[at : at + n])
            at += n
        if self._next is None and self._parts[-1].ntotal >= self.chunk // 2:
            self._next = _Ahead(self.d, self.chunk)

    def remove_ids(self, sel: faiss.IDSelector) -> int:
        removed = sum(int(p.remove_ids(sel)) for p in self._parts)
        # Emptied chunks go, but one always stays to take adds.
        self._parts = [p for p in self._parts[:-1] if p.ntotal] + self._parts[-1:]
        self._count_sealed()
        return removed

    def reconstruct_batch(self, ids: np.ndarray) -> np.ndarray:
        """The vectors of these ids (every one must be present), in their order."""
        out = np.empty((len(ids), self.d), np.float32)
        found = np.zeros(len(ids), bool)
        for p in self._parts:
            here = np.isin(ids, faiss.vector_to_array(p.id_map))
            if here.any():
                out[here] = p.reconstruct_batch(np.ascontiguousarray(ids[here]))
                found |= here
        if not found.all():
            raise KeyError(f"ids not in the index: {ids[~found][:5].tolist()}")
        return out

    def search(
        self, queries: np.ndarray, k: int, params: faiss.SearchParameters | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        if len(self._parts) == 1:
            return self._parts[0].search(queries, k, params=params)
        found = [p.search(queries, k, params=params) for p in self._parts]
        scores = np.concatenate([s for s, _ in found], axis=1)
        ids = np.concatenate([i for _, i in found], axis=1)
        # Best first; a stable sort keeps FAISS's order among equal scores (and the padding last).
        best = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(scores, best, axis=1), np.take_along_axis(ids, best, axis=1)

    def ids(self) -> np.ndarray:
        return np.concatenate([faiss.vector_to_array(p.id_map) for p in self._parts])

    def serialize(self) -> list[np.ndarray]:
        return [faiss.serialize_index(p) for p in self._parts if p.ntotal] or [
            faiss.serialize_index(self._parts[0])
        ]

    @classmethod
    def deserialize(cls, blobs: list[np.ndarray], d: int) -> ChunkedFlat:
        return cls(d, [_flat_from(blob, d) for blob in blobs])


def _chunk(d: int) -> faiss.Index:
    """An empty chunk that grows as it fills."""
    return faiss.IndexIDMap2(faiss.IndexFlatIP(d))


class _Ahead:
    """An empty chunk with room for ``chunk`` vectors, made on a thread of its own."""

    def __init__(self, d: int, chunk: int) -> None:
        self._d = d
        self._index: faiss.Index | None = None
        self._thread = threading.Thread(
            target=self._make, args=(d, chunk), name="flat-chunk-ahead", daemon=True
        )
        self._thread.start()

    def _make(self, d: int, chunk: int) -> None:
        flat = faiss.IndexFlatIP(d)
        # Sized up (allocated and zeroed: every page touched) and back: a vector keeps its
        # capacity, so the adds to come neither reallocate nor fault.
        flat.codes.resize(chunk * flat.code_size)
        flat.codes.resize(0)
        self._index = faiss.IndexIDMap2(flat)

    def get(self) -> faiss.Index:
        self._thread.join()
        # Where making it failed (out of memory), a chunk that grows as it fills.
        return self._index if self._index is not None else _chunk(self._d)


def _flat_from(blob: np.ndarray, d: int) -> faiss.Index:
    index = faiss.deserialize_index(blob)
    if not isinstance(index, faiss.IndexIDMap2) or not isinstance(
        faiss.downcast_index(index.index), faiss.IndexFlatIP
    ):
        raise ValueError(f"expected an IDMap2,Flat index, got {type(index).__name__}")
    if index.d != d:
        raise ValueError(f"index has dim {index.d}, expected {d}")
    return index
