"""One index shard: a ``SpaceIndex`` per vector space plus each row's time span, made
durable by a write-ahead log and snapshots.

A row's kind picks its spaces (``_rows.py``); all kinds share the one id -> time table, so
a time lookup and a delete by video cover them all. Every add and delete is logged before
it is applied, and synced before it is acknowledged. A snapshot (``_snapshot.py``) is
written when the log has grown past ``cfg.snapshot_log_bytes`` (and half the last
snapshot's size); the log it covers is then deleted. Start-up (``_loading.py``) = last
snapshot + replay of the log after it. Index types change with size (``space.py``); rebuilds
run off the write path (``_rebuilding.py``), with the writes that arrive meanwhile
re-applied to the new index before it replaces the old one. With ``background``, snapshots
and rebuilds run on a worker thread (``_upkeep.py``).

A shard directory has one writer (``writer=True``): each replica of a shard has its own
directory. The primary numbers the operations; a follower logs and applies each at the
primary's seq as it is forwarded (``apply``), and takes what it lacks from another replica's
``changes_after`` (``install``, ``_loading.py``). Readers (``writer=False``, the command
line's ``local.py``) only load snapshot + log.

Limits: a rebuild or a snapshot briefly holds about twice the index memory.
"""

from __future__ import annotations

import threading
from pathlib import Path

import faiss
import numpy as np

from vifusion.config import Config
from vifusion.index import _snapshot
from vifusion.index._loading import WAL_DIR, Loading
from vifusion.index._rebuilding import Rebuilding
from vifusion.index._rows import COLUMNS, DIMS, SPACES_OF_KIND, by_kind, check_batch, check_queries
from vifusion.index._snapshot import SNAPSHOT
from vifusion.index._upkeep import Task, Worker
from vifusion.index._vectors import VectorStore, path_for
from vifusion.index.model import check_model, model_record
from vifusion.index.space import IndexPolicy
from vifusion.index.wal import Delete, LogCorrupt, Op, WriteAheadLog
from vifusion.types import KIND_OF_SPACE, SPACES, FusedBatch, kind_of

__all__ = ["DIMS", "SNAPSHOT", "WAL_DIR", "Shard", "check_queries"]

# Batch ids remembered for idempotent re-sends (kept in snapshots too): senders keep only a
# few batches in flight, and a re-applied batch is an upsert of the same ids anyway.
_SEEN_BATCHES = 1 << 14


class Shard(Loading, Rebuilding):
    """The vectors of the videos routed to one shard, every space.

    Re-adding an id replaces its vectors and time span (re-indexing a video is an upsert).
    Thread-safe; background work (snapshots, rebuilds) runs in one daemon thread.
    """

    def __init__(
        self,
        shard_no: int,
        directory: Path,
        cfg: Config,
        *,
        writer: bool = True,
        background: bool = False,
    ) -> None:
        self.shard_no = shard_no
        self.directory = Path(directory)
        self.writer = writer
        self.threads = cfg.faiss_threads or cfg.threads
        self._policy = IndexPolicy(
            cfg.index_exact_max,
            cfg.index_nprobe,
            cfg.index_codec,
            cfg.index_compress_min,
            cfg.index_pq_visual_bytes,
            cfg.index_pq_text_bytes,
            cfg.index_refine,
        )
        self._snapshot_log_bytes = cfg.snapshot_log_bytes
        self._lock = threading.RLock()
        self._snapshot_lock = threading.Lock()
        self._use_threads()
        self.directory.mkdir(parents=True, exist_ok=True)
        if writer:
            _snapshot.remove_stray_temps(self.directory)
        self._capture: dict[str, list[tuple]] = {}  # per space being rebuilt: ops since it began
        self._trained: dict[str, tuple[float, float]] = {}  # space -> last rebuild's wall times
        # a compressed space's exact vectors (one file per space, used once it compresses)
        self._stores = {
            space: VectorStore(path_for(self.directory, space), d, writable=writer)
            for space, d in DIMS.items()
        }
        self._load_state()
        # before any write: a shard never takes or answers with vectors of another model
        check_model(
            self.directory, model_record(cfg.visual_model), self.seq > 0, writer, cfg.visual_model
        )
        self._wal = WriteAheadLog(self.directory / WAL_DIR, after=self.seq) if writer else None
        if self._wal is not None and self._wal.last_seq != self.seq:
            raise LogCorrupt(
                f"{self.directory}: log ends at seq {self._wal.last_seq}, replay reached {self.seq}"
            )
        self._worker = (
            Worker(f"shard {shard_no}", f"shard-{shard_no}-upkeep", self._run)
            if background
            else None
        )
        self._upkeep()

    # -- writes (the writer) ----------------------------------------------------------

    def add(self, batch: FusedBatch) -> int:
        """Log, then add (or replace) a batch's rows in their spaces; return the frames held.

        A ``batch_id`` seen recently is ignored. Within one batch a repeated id keeps its
        last occurrence. Durable when it returns.
        """
        n, seq = self.stage(batch)
        self.commit(seq)
        return n

    def stage(self, batch: FusedBatch) -> tuple[int, int]:
        """``add``, but its log record is written and not yet synced: searches may see the
        batch before ``commit(seq)`` makes it durable, and only then may it be acknowledged
        (a crash in between loses it, unacknowledged: its sender sends it again). Returns the
        frames held and the seq to commit (a batch seen before: the latest, which covers
        it whether or not its first copy is durable yet)."""
        check_batch(batch)
        with self._lock:
            if batch.batch_id not in self._seen:
                self._apply(self._log(batch), batch)
            n, seq = self.ntotal, self.seq
        self._upkeep()
        return n, seq

    def commit(self, seq: int) -> float:
        """Make the writes staged through ``seq`` durable (with every one staged by then: a
        group commit). Returns the seconds this call spent syncing the log."""
        return self._wal.sync(seq) if self._wal is not None else 0.0

    @property
    def last_sync_s(self) -> float:
        """Seconds the last log sync took (0 on a reader)."""
        return self._wal.last_sync_s if self._wal is not None else 0.0

    def delete_video(self, video_id: int) -> int:
        """Remove all rows of a video (every kind) from every space; return how many were
        removed. Durable when it returns."""
        with self._lock:
            n = self._times.count(video_id)
            if n:
                self._apply(self._log(Delete(video_id)), Delete(video_id))
            seq = self.seq
        self.commit(seq)
        self._upkeep()
        return n

    def snapshot(self) -> None:
        """Write a snapshot atomically (a crash leaves the previous one or this one) and drop
        the log it covers. A no-op when nothing changed since the last one: no write and no
        index rebuilt (a rebuild changes no seq)."""
        if self._wal is None:
            raise RuntimeError("only the writer snapshots")
        with self._snapshot_lock:
            with self._lock:
                fresh = self.seq == self._snapshot_seq and not self._rebuilt
                if fresh and (self.directory / SNAPSHOT).exists():
                    return
                seq, self._rebuilt = self.seq, False
                parts = _snapshot.pack(
                    self.shard_no, seq, self._times, list(self._seen), self._spaces
                )
                self._wal.rotate()
            rows = _snapshot.vector_rows(parts)
            for space in rows:  # the rows the snapshot counts are synced before it
                self._stores[space].sync()
            size = _snapshot.write(self.directory, parts)
            with self._lock:
                self._snapshot_seq = seq
                self._snapshot_size = size
                self._snapshot_rows = rows
                self._wal.drop_through(seq)

    # -- writes (followers) -----------------------------------------------------------

    def apply(self, seq: int, op: Op) -> int:
        """Log (synced) and apply the primary's operation ``seq`` where it is the next one;
        one already held is skipped. Returns the seq held: below ``seq`` means a gap (this
        replica missed earlier operations: the sender sends them, ``changes_after``)."""
        with self._lock:
            if seq == self.seq + 1:
                self._apply(self._log(op), op)
            held = self.seq
        self.commit(held)
        self._upkeep()
        return held

    # -- reads -------------------------------------------------------------------------

    def search(
        self, space: str, queries: np.ndarray, k: int, videos: list[int] | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Top-k frames of one space for each query, best first; with ``videos``, only
        frames of those videos count (no top-k is lost to the filter).

        Returns scores (nq, k) float32, ids (nq, k) int64 and times (nq, k, 2) float32; where
        fewer than k vectors exist the id is -1, the time (0, 0) and the score FAISS's minimum.
        """
        queries = check_queries(space, queries, k)
        with self._lock:
            self._use_threads()
            subset = None
            if videos is not None:
                subset = self._ids_of(videos, KIND_OF_SPACE[space])
                if not len(subset):
                    nq = len(queries)
                    return (
                        np.full((nq, k), -np.finfo(np.float32).max, np.float32),
                        np.full((nq, k), -1, np.int64),
                        np.zeros((nq, k, 2), np.float32),
                    )
            scores, ids = self._spaces[space].search(queries, int(k), subset)
            times = np.zeros(ids.shape + (2,), dtype=np.float32)
            found = ids >= 0
            if found.any():
                times[found] = self._times.get(ids[found])
        return scores, ids, times

    def frames(
        self, space: str, video_id: int, start_s: float, end_s: float, limit: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The stored vectors of a video's rows in ``space`` (frames for visual and semantic,
        segments or spans for speech and screen) that overlap [start_s, end_s], in time
        order: times (n, 2) float32 and vectors (n, d) float32 (n may be 0).

        ``limit``: at most that many rows, spread evenly over those in range (first and last
        included), so the range is in effect clamped to the video's extent and a range of
        hours costs what a short one does. Under the lock only the video's row table is
        copied and the picked rows' vectors read: every write and search of the shard waits
        on it. The scan and the pick run outside it."""
        if space not in DIMS:
            raise ValueError(f"unknown space {space!r}; expected one of {SPACES}")
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be positive, got {limit}")
        kind = KIND_OF_SPACE[space]
        with self._lock:
            ids, spans = self._times.of_video(video_id)
        keep = (spans[:, 1] > start_s) & (spans[:, 0] < end_s) & (kind_of(ids) == kind)
        ids, spans = ids[keep], spans[keep]
        order = np.lexsort((ids, spans[:, 1], spans[:, 0]))  # by time, then id
        if limit is not None and len(order) > limit:
            order = order[np.linspace(0, len(order) - 1, limit).round().astype(int)]
        ids, spans = ids[order], spans[order]
        with self._lock:
            held, now = self._times.find(ids)
            same = held & (now == spans).all(axis=1)  # not deleted or replaced meanwhile
            ids, spans = ids[same], spans[same]
            vectors = self._spaces[space].reconstruct(ids)
        return spans.reshape(-1, 2), vectors

    @property
    def ntotal(self) -> int:
        """Frames held (the same in visual and semantic)."""
        return self._spaces["visual"].ntotal

    def stats(self) -> dict:
        """Counts and state for monitoring: vectors, index type and its resident bytes per
        space (``vectors`` ["visual"] are the frames), the wall times (start, end) of each
        space's last rebuild here, videos, the last applied log seq and the seq the last
        snapshot holds."""
        with self._lock:
            return {
                "shard": self.shard_no,
                "vectors": {space: sp.ntotal for space, sp in self._spaces.items()},
                "videos": self._times.video_count,
                "index": {space: sp.factory for space, sp in self._spaces.items()},
                "index_bytes": {space: sp.memory_bytes() for space, sp in self._spaces.items()},
                "times_bytes": self._times.nbytes,
                "trained": dict(self._trained),
                "seq": self.seq,
                "snapshot_seq": self._snapshot_seq,
            }

    def video_ids(self) -> list[int]:
        """The distinct videos held, ascending."""
        with self._lock:
            return self._times.videos()

    def wait_idle(self) -> None:
        """Return once the background work scheduled so far is done (for tests and shutdown)."""
        if self._worker is not None:
            self._worker.wait_idle()

    def close(self) -> None:
        """Finish the background work and close the log: the directory is then another
        process's to open (a reindex hands its new shards to their actors so)."""
        self.wait_idle()
        with self._lock:
            if self._wal is not None:
                self._wal.close()
                self._wal = None

    # -- applying operations (under the lock) -----------------------------------------

    def _log(self, op: Op) -> int:
        if self._wal is None:
            raise RuntimeError("this replica only reads; writes go to the shard's writer")
        return self._wal.write(op)

    def _apply(self, seq: int, op: Op) -> None:
        if isinstance(op, Delete):
            self._remove(self._times.pop_video(op.video_id))
        else:
            self._apply_add(op)
            self._seen[op.batch_id] = None
            if len(self._seen) > _SEEN_BATCHES:
                self._seen.popitem(last=False)
        self.seq = seq

    def _apply_add(self, batch: FusedBatch) -> None:
        n = len(batch.ids)
        if not n:
            return
        self._use_threads()
        ids = np.asarray(batch.ids, dtype=np.int64)
        # Keep the last occurrence of each id so the index never holds duplicates.
        _, last_rev = np.unique(ids[::-1], return_index=True)
        keep = np.sort(n - 1 - last_rev)
        ids, times = ids[keep], np.asarray(batch.times, np.float32)[keep]
        present = self._times.set(ids, times)
        self._remove(ids[present])
        for kind, mine in by_kind(ids):
            rows = keep if mine is None else keep[mine]
            kind_ids = ids if mine is None else ids[mine]
            for space in SPACES_OF_KIND[kind]:
                vecs = np.ascontiguousarray(batch.space(COLUMNS[space])[rows], dtype=np.float32)
                self._spaces[space].add(kind_ids, vecs)
                if space in self._capture:
                    self._capture[space].append(("add", kind_ids, vecs))

    def _remove(self, ids: np.ndarray) -> None:
        for kind, mine in by_kind(ids):
            kind_ids = ids if mine is None else ids[mine]
            for space in SPACES_OF_KIND[kind]:
                self._spaces[space].remove(kind_ids)
                if space in self._capture:
                    self._capture[space].append(("remove", kind_ids))

    # -- background upkeep ------------------------------------------------------------

    def _upkeep(self) -> None:
        """Schedule what the shard's growth calls for: a snapshot, an index rebuild."""
        wanted = []
        with self._lock:
            for space, sp in self._spaces.items():
                # a reader (a short-lived process) keeps the codes its writer re-trains
                if space not in self._capture and sp.needs_rebuild(codes=self.writer):
                    wanted.append(("rebuild", space))
            grown = self._wal is not None and self._wal.bytes_since_rotate > max(
                self._snapshot_log_bytes, self._snapshot_size // 2
            )
            # a rebuilt index is saved once no other rebuild is due, so a restart loads it
            # instead of training again
            rebuilt = self._wal is not None and self._rebuilt and not wanted and not self._capture
            if grown or rebuilt:
                wanted.append(("snapshot", None))
        for task in wanted:
            if self._worker is None:
                self._run(task)
            else:
                self._worker.schedule(task)

    def _run(self, task: Task) -> None:
        kind, space = task
        if kind == "snapshot":
            self.snapshot()
        else:
            self._rebuild(space)

    # -- helpers ------------------------------------------------------------------------

    def _use_threads(self) -> None:
        # Ray workers run with OMP_NUM_THREADS=1, and the OpenMP setting is per thread, so set
        # it on whichever thread runs the call.
        faiss.omp_set_num_threads(self.threads)

    def _ids_of(self, videos: list[int], kind: int) -> np.ndarray:
        ids = self._times.ids_of(videos)
        return ids[kind_of(ids) == kind]
