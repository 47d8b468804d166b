"""One index shard: an exact inner-product index per vector space, plus each frame's time span.

Limits: flat (brute-force) search, so memory and search time grow linearly with the vectors
held (~6.6 KB per frame across both spaces); ``commit`` briefly needs about twice the index
memory (it serialises in RAM); one ``Shard`` per directory, and not thread-safe (the router
runs it as a Ray actor with ``max_concurrency=1``).
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from collections import OrderedDict
from pathlib import Path

import faiss
import numpy as np

from vifusion.types import (
    FRAME_BITS,
    SEMANTIC_DIM,
    SPACES,
    VISUAL_DIM,
    FusedBatch,
    video_id_range,
)

DIMS: dict[str, int] = {"visual": VISUAL_DIM, "semantic": SEMANTIC_DIM}
SNAPSHOT = "snapshot.npz"
_TMP_PREFIX = ".snapshot-"
_TMP_SUFFIX = ".tmp"
_FORMAT = 1
# Batch ids remembered for idempotent re-sends; senders keep only a few batches in flight,
# and a re-applied batch is an upsert of the same ids anyway, so a bounded memory suffices.
_SEEN_BATCHES = 1 << 16


def check_queries(space: str, queries: np.ndarray, k: int) -> np.ndarray:
    """Validate a search request; return the queries as C-contiguous float32 (nq, d)."""
    if space not in DIMS:
        raise ValueError(f"unknown space {space!r}; expected one of {SPACES}")
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    queries = np.asarray(queries)
    d = DIMS[space]
    if queries.ndim != 2 or queries.shape[1] != d:
        raise ValueError(f"{space} queries must have shape (nq, {d}), got {queries.shape}")
    return np.ascontiguousarray(queries, dtype=np.float32)


def _new_index(d: int) -> faiss.IndexIDMap2:
    # Vectors arrive L2-normalised, so inner product is cosine similarity.
    return faiss.IndexIDMap2(faiss.IndexFlatIP(d))


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Shard:
    """The vectors of the videos routed to one shard, both spaces, with a durable snapshot.

    Vectors added since the last ``commit`` are lost if the process dies. Re-adding an id
    replaces its vectors and time span (re-indexing a video is an upsert).
    """

    def __init__(self, shard_no: int, directory: Path, threads: int) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.shard_no = shard_no
        self.directory = Path(directory)
        self.threads = threads
        self._use_threads()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._indexes: dict[str, faiss.IndexIDMap2] = {s: _new_index(d) for s, d in DIMS.items()}
        # video_id -> {vector id -> (t_start, t_end)}: per video so deletes and counts are cheap.
        self._times: dict[int, dict[int, tuple[float, float]]] = {}
        self._dirty = False
        self._remove_stray_temps()
        if (self.directory / SNAPSHOT).exists():
            self._load(self.directory / SNAPSHOT)

    # -- writes ------------------------------------------------------------------------

    def add(self, batch: FusedBatch) -> int:
        """Add (or replace) a batch's frames in both spaces; return the vectors held.

        A ``batch_id`` seen recently since this shard started is ignored. Within one batch a
        repeated id keeps its last occurrence.
        """
        if batch.batch_id in self._seen:
            return self.ntotal
        n = len(batch.ids)
        ids = np.asarray(batch.ids, dtype=np.int64)
        times = np.asarray(batch.times, dtype=np.float32)
        if ids.shape != (n,) or times.shape != (n, 2) or batch.features.shape != (n, VISUAL_DIM + SEMANTIC_DIM):
            raise ValueError(
                f"malformed batch {batch.batch_id}: ids {ids.shape}, times {times.shape}, "
                f"features {batch.features.shape}"
            )
        if n:
            if (ids < 0).any():
                raise ValueError(f"batch {batch.batch_id} has negative vector ids")
            self._use_threads()
            # Keep the last occurrence of each id so the index never holds duplicates.
            _, last_rev = np.unique(ids[::-1], return_index=True)
            keep = np.sort(n - 1 - last_rev)
            ids, times = ids[keep], times[keep]
            present = np.fromiter((self._has(int(i)) for i in ids), bool, len(ids))
            if present.any():
                sel = faiss.IDSelectorBatch(np.ascontiguousarray(ids[present]))
                for index in self._indexes.values():
                    index.remove_ids(sel)
            for space, index in self._indexes.items():
                vecs = np.ascontiguousarray(batch.space(space)[keep], dtype=np.float32)
                index.add_with_ids(vecs, ids)
            for i, (t0, t1) in zip(ids.tolist(), times.tolist()):
                self._times.setdefault(i >> FRAME_BITS, {})[i] = (t0, t1)
            self._dirty = True
        self._seen[batch.batch_id] = None
        if len(self._seen) > _SEEN_BATCHES:
            self._seen.popitem(last=False)
        return self.ntotal

    def delete_video(self, video_id: int) -> int:
        """Remove all frames of a video from both spaces; return how many frames were removed."""
        lo, hi = video_id_range(video_id)
        sel = faiss.IDSelectorRange(lo, hi)
        removed = [int(index.remove_ids(sel)) for index in self._indexes.values()]
        self._times.pop(video_id, None)
        if any(removed):
            self._dirty = True
        return removed[0]

    def commit(self) -> None:
        """Write a snapshot atomically: a crash leaves the previous snapshot or this one.

        A no-op when nothing changed since the last commit or load.
        """
        path = self.directory / SNAPSHOT
        if not self._dirty and path.exists():
            return
        ids, times = self._flat_times()
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=_TMP_PREFIX, suffix=_TMP_SUFFIX)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(
                    f,
                    format=np.int64(_FORMAT),
                    shard=np.int64(self.shard_no),
                    ids=ids,
                    times=times,
                    **{space: faiss.serialize_index(index) for space, index in self._indexes.items()},
                )
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(self.directory)
        self._dirty = False

    # -- reads -------------------------------------------------------------------------

    def search(
        self, space: str, queries: np.ndarray, k: int, videos: list[int] | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Top-k frames of one space for each query, best first; with ``videos``, only
        frames of those videos count (an exact filter: no top-k is lost to it).

        Returns scores (nq, k) float32, ids (nq, k) int64 and times (nq, k, 2) float32; where
        fewer than k vectors exist the id is -1, the time (0, 0) and the score FAISS's minimum.
        """
        queries = check_queries(space, queries, k)
        self._use_threads()
        params = None
        if videos is not None:
            ids = self._ids_of(videos)
            if not len(ids):
                nq = len(queries)
                return (np.full((nq, k), -np.finfo(np.float32).max, np.float32),
                        np.full((nq, k), -1, np.int64), np.zeros((nq, k, 2), np.float32))
            params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(ids))
        scores, ids = self._indexes[space].search(queries, int(k), params=params)
        times = np.zeros(ids.shape + (2,), dtype=np.float32)
        found = ids >= 0
        if found.any():
            vt = self._times
            times[found] = [vt[i >> FRAME_BITS][i] for i in ids[found].tolist()]
        return scores, ids, times

    def frames(
        self, space: str, video_id: int, start_s: float, end_s: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """The stored vectors of a video's frames that overlap [start_s, end_s], in time
        order: times (n, 2) float32 and vectors (n, d) float32 (n may be 0)."""
        if space not in DIMS:
            raise ValueError(f"unknown space {space!r}; expected one of {SPACES}")
        frames = self._times.get(video_id, {})
        picked = sorted((t, i) for i, t in frames.items() if t[1] > start_s and t[0] < end_s)
        if not picked:
            return np.zeros((0, 2), np.float32), np.zeros((0, DIMS[space]), np.float32)
        ids = np.array([i for _, i in picked], dtype=np.int64)
        vectors = self._indexes[space].reconstruct_batch(ids)
        return np.array([t for t, _ in picked], dtype=np.float32), vectors

    @property
    def ntotal(self) -> int:
        """Frames held (the same in both spaces)."""
        return int(self._indexes["visual"].ntotal)

    def stats(self) -> dict:
        """Counts for monitoring: vectors per space and distinct videos."""
        return {
            "shard": self.shard_no,
            "vectors": {space: int(index.ntotal) for space, index in self._indexes.items()},
            "videos": len(self._times),
            "index": "IDMap2,Flat",
        }

    def video_ids(self) -> list[int]:
        """The distinct videos held, ascending."""
        return sorted(self._times)

    # -- internals ---------------------------------------------------------------------

    def _use_threads(self) -> None:
        # Ray workers run with OMP_NUM_THREADS=1, and the OpenMP setting is per thread, so set
        # it on whichever thread runs the call.
        faiss.omp_set_num_threads(self.threads)

    def _ids_of(self, videos: list[int]) -> np.ndarray:
        ids = [i for v in videos for i in self._times.get(int(v), ())]
        return np.array(ids, dtype=np.int64)

    def _has(self, vector_id: int) -> bool:
        frames = self._times.get(vector_id >> FRAME_BITS)
        return frames is not None and vector_id in frames

    def _flat_times(self) -> tuple[np.ndarray, np.ndarray]:
        n = sum(len(v) for v in self._times.values())
        ids = np.empty(n, dtype=np.int64)
        times = np.empty((n, 2), dtype=np.float32)
        pos = 0
        for frames in self._times.values():
            m = len(frames)
            ids[pos : pos + m] = np.fromiter(frames.keys(), np.int64, m)
            times[pos : pos + m] = np.array(list(frames.values()), dtype=np.float32).reshape(m, 2)
            pos += m
        return ids, times

    def _remove_stray_temps(self) -> None:
        # A crash mid-commit leaves a temp file that was never renamed into place.
        for p in self.directory.glob(f"{_TMP_PREFIX}*{_TMP_SUFFIX}"):
            p.unlink(missing_ok=True)

    def _load(self, path: Path) -> None:
        if not zipfile.is_zipfile(path):
            raise ValueError(f"{path}: not a shard snapshot (not an .npz archive)")
        with np.load(path, allow_pickle=False) as z:
            missing = {"format", "ids", "times", *SPACES} - set(z.files)
            if missing:
                raise ValueError(f"{path}: not a shard snapshot (missing {sorted(missing)})")
            if int(z["format"]) != _FORMAT:
                raise ValueError(f"{path}: snapshot format {int(z['format'])}, expected {_FORMAT}")
            try:
                indexes = {space: faiss.deserialize_index(z[space]) for space in SPACES}
            except RuntimeError as e:  # FAISS reports a bad index blob as RuntimeError
                raise ValueError(f"{path}: unreadable index: {e}") from e
            ids, times = z["ids"], z["times"]
        expected = np.sort(ids)
        for space, index in indexes.items():
            if index.d != DIMS[space]:
                raise ValueError(f"{path}: {space} index has dim {index.d}, expected {DIMS[space]}")
            if not np.array_equal(np.sort(faiss.vector_to_array(index.id_map)), expected):
                raise ValueError(f"{path}: {space} index ids do not match the stored times")
        self._indexes = indexes
        self._times = {}
        for i, (t0, t1) in zip(ids.tolist(), times.tolist()):
            self._times.setdefault(i >> FRAME_BITS, {})[i] = (t0, t1)
