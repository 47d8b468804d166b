"""A reindex while the service runs (``POST /v1/reindex``): the library embedded again with
a visual model, searches and ingest going on, then one switch.

It runs in the ingest pool (``pool.py``), the one process per data dir that writes videos:
``reindex.Rebuild`` embeds every ready video into a new shard set while ingest goes on into
the set in use, then catches up with the videos added or deleted meanwhile, until a round
finds few. Then the pool holds its jobs (``JobRunner.held``: the running ones end, none
starts), catches up a last time, switches the set in use and moves to it (``Runtime.
follow_index``: the new set's shard actors, the new model's extractors). Every API replica
moves on its next request, searcher and shards together, so a query is never embedded by one
model and searched among another's vectors. The old set's actors answer what was sent to
them for ``_GRACE_S`` more, then stop and the old set is removed; a delete that reached the
old set during the switch is applied to the new one from the catalog.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import ray

from vifusion.catalog import open_catalog
from vifusion.index.layout import remove_index
from vifusion.ingest.jobs import JobRunner
from vifusion.runtime import Runtime

log = logging.getLogger(__name__)
_ROUNDS = 5  # catch-up rounds while ingest goes on, before the one in which it is held
_FEW = 3  # a round that embeds this many videos or fewer is the last before the hold
_GRACE_S = 5.0  # how long the old set answers the searches sent to it before the switch
_LOWER = 10  # the reindex thread's niceness above its process's: searches and ingest first


class ReindexBusy(RuntimeError):
    """A reindex runs already on this data dir."""


@dataclass
class ReindexState:
    """Where the data dir's reindex stands: ``state`` idle, embedding, switching, ready
    (switched; the old set removed, else ``error`` says why not) or failed (``error``; the set
    in use untouched)."""

    state: str = "idle"
    model: str = ""  # the visual_model it embeds with
    videos_done: int = 0  # in the current round, of videos_total
    videos_total: int = 0
    videos: int = 0  # in the new set
    frames: int = 0
    skipped: dict[int, str] = field(default_factory=dict)  # video id -> why it was left out
    error: str | None = None
    started_at: float | None = None
    finished_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class LiveReindex:
    """The pool's reindexer: ``start`` one (refused while one runs), ``state`` to follow it."""

    def __init__(self, rt: Runtime, jobs: JobRunner) -> None:
        self._rt = rt
        self._jobs = jobs
        self._lock = threading.Lock()
        self._state = ReindexState()
        self._thread: threading.Thread | None = None

    def start(self, visual_model: str) -> ReindexState:
        """Begin embedding the library with ``visual_model`` in the background."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                raise ReindexBusy(f"a reindex to {self._state.model} runs already")
            self._state = ReindexState("embedding", visual_model, started_at=time.time())
            self._thread = threading.Thread(
                target=self._run, args=(visual_model,), name="reindex", daemon=True
            )
            self._thread.start()
        return self.state

    @property
    def state(self) -> ReindexState:
        with self._lock:
            return ReindexState(**asdict(self._state))

    def _run(self, visual_model: str) -> None:
        from vifusion.ingest.reindex import Rebuild

        # Background work, this thread and the threads it starts (which inherit it), below the
        # pool's own (Ray starts workers at niceness 15, so the shards' searches go first).
        me = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, me, min(19, os.getpriority(os.PRIO_PROCESS, me) + _LOWER))
        cfg = self._rt.cfg.updated({"visual_model": visual_model})
        try:
            rebuild = Rebuild(cfg, self._progress)
        except Exception as e:  # the model cannot be loaded: nothing was changed
            return self._failed(e)
        switched = False
        catalog = open_catalog(cfg, read_only=True)
        try:
            for _ in range(_ROUNDS):
                embedded = rebuild.catch_up(catalog)
                self._counts(rebuild)
                if embedded <= _FEW:
                    break
            self._update(state="switching")
            with self._jobs.held():
                rebuild.catch_up(catalog)
                self._counts(rebuild)
                old_folder = rebuild.switch()
                switched = True
                old = self._rt.follow_index()
        except Exception as e:
            if not switched:
                rebuild.abandon()
            return self._failed(e)
        finally:
            catalog.close()
        time.sleep(_GRACE_S)
        error = None
        try:
            if old is not None:
                old.shutdown()
            remove_index(cfg.data_dir, old_folder)
            self._drop_deleted()
        except Exception as e:  # switched all the same: the next reindex removes the old set
            error = f"switched, but the old set was not cleaned up: {e}"
            log.error("reindex: %s", error)
        self._update(state="ready", error=error, finished_at=time.time())
        log.warning("reindex: now searching with %s", visual_model)

    def _drop_deleted(self) -> None:
        """Remove from the new set the videos deleted while it was switched to (the catalog
        went first, the delete reached the old set)."""
        shards = self._rt.shards
        for handle in shards.handles:
            for video_id in ray.get(handle.video_ids.remote()):
                if self._rt.catalog.get_video(video_id) is None:
                    shards.delete_video(video_id)

    def _counts(self, rebuild) -> None:
        done = rebuild.done
        self._update(videos=done.videos, frames=done.frames, skipped=dict(done.skipped))

    def _progress(self, done: int, total: int) -> None:
        self._update(videos_done=done, videos_total=total)

    def _update(self, **changes: Any) -> None:
        with self._lock:
            for name, value in changes.items():
                setattr(self._state, name, value)

    def _failed(self, e: Exception) -> None:
        log.error("reindex to %s failed: %s", self._state.model, e)
        self._update(state="failed", error=str(e) or type(e).__name__, finished_at=time.time())
