"""The ingest queue of a running service: jobs acknowledged over HTTP, run in the background.

The queue *is* the catalog: a job is a row written (fsynced) before the client hears 202, so
a crash loses no acknowledged job. A runner leases each job it takes (``Catalog.lease_job``)
and renews its leases every third of ``job_lease_s``: a job whose runner died is taken over
once its lease runs out (at once by the runner's next incarnation: same name), and runs again
from the start of its video: vector ids are ``video_id << 24 | frame``, so a re-run overwrites
what the first run sent instead of adding frames twice. A runner whose job was taken over
stops it at its next write (LeaseLost) and leaves it to the new holder.

Each worker thread leases as an owner of its own (``<runner>/ingest-<i>``) and writes only
the jobs it holds (``Catalog.holding``), and a runner never takes a job one of its own
threads runs, even one whose lease ran out meanwhile (a catalog outage longer than the lease):
one job never runs twice in one process. A job taken ``job_max_attempts`` times without
ending (a video that kills its worker each time) is failed at its next take, not run again.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import ray

from vifusion._files import storage_reason
from vifusion.catalog import TEXT_KINDS, Job, LeaseLost
from vifusion.cluster.placement import planned_extractors
from vifusion.config import Config
from vifusion.ingest.sources import (
    SourceError,
    download,
    is_path_source,
    new_media_path,
    open_video_file,
    url_filename,
)
from vifusion.runtime import Runtime

log = logging.getLogger(__name__)
_PAUSE_S = 2.0  # how long ingest waits before writing again to a data dir that refused a write
_STORAGE_TRIES = 30  # runs of one job cut short by a full data dir before it is failed


@dataclass
class IngestStats:
    jobs_ready: int = 0
    jobs_failed: int = 0
    frames_indexed: int = 0
    busy_s: float = 0.0  # wall time spent running jobs
    # Filled in by the ingest pool (plan/follow.py): plans made again for a changed link since
    # it started, and the frames/s the plan in force predicts (0 without one).
    replans: int = 0
    plan_predicted_fps: float = 0.0
    extractors: int = 0  # extractor actors running (0 until the first job starts them)

    @property
    def frames_per_s(self) -> float:
        return self.frames_indexed / self.busy_s if self.busy_s else 0.0


class JobRunner:
    """One thread per extractor actor, each taking the oldest job there is to take, and one
    renewing the leases. The extractors are the runtime's indexer, started on the first job
    (they load models): ``num_extractors``, or as many as the applied plan places. After
    ``replan`` no job is taken until those running end; then the extractors and node
    aggregators stop, and the next job starts them where the new plan says. ``name``: the
    runner's, the same in each of its incarnations; worker ``i`` leases jobs as
    ``name/<incarnation>/ingest-<i>`` and writes as that owner. Elsewhere the runtime's
    catalog writes as ``name/<incarnation>``, which holds no job."""

    def __init__(self, cfg: Config, rt: Runtime, name: str) -> None:
        self.cfg = cfg
        self.rt = rt
        self.catalog = rt.catalog
        self.name = name
        self.owner = f"{name}/{uuid.uuid4().hex[:12]}"
        self.catalog.holder = self.owner
        self.stats = IngestStats()
        self._lock = threading.Lock()  # guards taking a job, starting the extractors, the stats
        self._wake = threading.Condition(self._lock)
        self._stop = False
        self._storage_tries: dict[str, int] = {}
        self._running: dict[str, str] = {}  # job id -> the owner its worker leased it as
        # The jobs this runner's last incarnation held are retaken at the first take (on a
        # data dir that refuses writes they wait); jobs put aside by a full data dir too,
        # each with the owner that holds it.
        self._retaken = False
        self._stalled: list[tuple[str, str]] = []
        self._replan = False
        self._held = 0  # ``held`` blocks open: no job is taken
        self._plan = cfg.plan  # the plan in force, or (after ``replan``) the one to move to
        self._count = self._planned_count()
        self._serving: set[int] = set()  # the extractors that have a worker thread
        self._threads = [threading.Thread(target=self._renew, name="leases", daemon=True)]
        self._threads[0].start()
        with self._lock:
            self._add_workers()

    def wake(self) -> None:
        """A job was queued."""
        with self._wake:
            self._wake.notify_all()

    def replan(self, plan: dict[str, Any] | None) -> None:
        """``plan`` was applied (``PlanFollower``): move the extractors and aggregators to it
        between jobs."""
        with self._wake:
            self._replan, self._plan = True, plan
            self._wake.notify_all()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A block in which no job runs: the running ones end first, and none is taken until
        it ends (a reindex switches shard sets in one)."""
        with self._wake:
            self._held += 1
            self._wake.wait_for(lambda: not self._running)
        try:
            yield
        finally:
            with self._wake:
                self._held -= 1
                self._wake.notify_all()

    @property
    def extractors(self) -> int:
        """Extractor actors running now."""
        indexer = self.rt.running_indexer()
        return len(indexer.extractors) if indexer is not None else 0

    def fusion_stats(self) -> list[dict]:
        """Transfer figures of each node aggregator (``Aggregator.stats``), with its ``node`` id."""
        indexer = self.rt.running_indexer()
        if indexer is None:
            return []
        aggregators = indexer.aggregators
        stats = ray.get([a.stats.remote() for a in aggregators.values()])
        return [{**s, "node": node} for node, s in zip(aggregators, stats, strict=True)]

    def close(self) -> None:
        """Stop taking jobs (the runtime closes the extractors)."""
        with self._wake:
            self._stop = True
            self._wake.notify_all()
        for t in self._threads:
            t.join(timeout=30)

    # -- internals ---------------------------------------------------------------------

    def _planned_count(self) -> int:
        """The extractors the indexer will start (``start_extractors``): the plan's,
        else ``num_extractors``."""
        return len(planned_extractors(self._plan) or ()) or self.cfg.num_extractors

    def _add_workers(self) -> None:
        """A worker thread for each extractor that has none (lock held); a worker past the
        count leaves at its next take."""
        for i in set(range(self._count)) - self._serving:
            self._serving.add(i)
            t = threading.Thread(target=self._work, args=(i,), name=f"ingest-{i}", daemon=True)
            self._threads.append(t)
            t.start()

    def _restart_indexer(self) -> None:
        """Between jobs (lock held): stop the extractors and aggregators and hand the runtime
        the new plan (``Runtime.use_plan``); the next job starts them by it, with a worker
        for each."""
        self.rt.use_plan(self._plan)
        self._replan = False
        self._count = self._planned_count()
        self._add_workers()
        self._wake.notify_all()
        log.warning("ingest: the extractors move to the new plan (%d of them)", self._count)

    def _owner(self, i: int) -> str:
        """The owner worker ``i`` leases and writes jobs as."""
        return f"{self.owner}/ingest-{i}"

    def _take(self, i: int) -> Job | None:
        """Claim the oldest queued job (moved to ``decoding``) for worker ``i``, waiting for
        one, never one this runner runs already; None once the runner stops or the
        extractors are fewer than ``i + 1``. A job taken ``job_max_attempts`` times already
        comes back failed (not leased). Jobs put aside (interrupted, or cut short by a full
        data dir) go back in the queue first; this raises while the catalog cannot be
        written."""
        with self._wake:
            while not self._stop:
                if self._replan and not self._running:
                    self._restart_indexer()
                if i >= self._count:
                    break
                if self._replan or self._held:  # no new job until the running ones end
                    self._wake.wait(timeout=2.0)
                    continue
                if not self._retaken:
                    self.catalog.expire_leases(self.name)
                    self._retaken = True
                while self._stalled:
                    job_id, owner = self._stalled[0]  # LeaseLost: taken over since, not ours
                    with self.catalog.holding(owner), contextlib.suppress(LeaseLost):
                        self.catalog.update_job(job_id, "queued", progress=0.0, frames_indexed=0)
                    self._stalled.pop(0)
                job = self.catalog.lease_job(
                    self._owner(i),
                    self.cfg.job_lease_s,
                    exclude=self._running.keys(),
                    max_attempts=self.cfg.job_max_attempts,
                )
                if job is not None:
                    if job.status != "failed":
                        self._running[job.id] = self._owner(i)
                    return job
                self._wake.wait(timeout=2.0)
            self._serving.discard(i)
        return None

    def _renew(self) -> None:
        """The heartbeat: renew every third of the lease, so that a late renewal or two do not
        lose a job; a job taken over meanwhile is logged (its worker stops at its next write,
        refused: LeaseLost, and leaves the job to the new holder)."""
        while True:
            with self._wake:
                self._wake.wait_for(lambda: self._stop, timeout=self.cfg.job_lease_s / 3)
                if self._stop:
                    return
                running = dict(self._running)
            held: set[str] = set()
            try:
                for owner in sorted(set(running.values())):
                    held.update(self.catalog.renew_leases(owner, self.cfg.job_lease_s))
            except Exception as e:  # the catalog cannot be reached or written: try again
                log.error("cannot renew the ingest leases: %s", e)
                continue
            for job_id in running.keys() - held:
                with self._lock:
                    still = job_id in self._running  # not ended since
                if still:
                    log.warning("job %s was taken over by another ingest worker", job_id)

    def _indexer(self):
        with self._lock:  # one thread starts the extractors; the others wait for them
            indexer = self.rt.indexer
            if len(indexer.extractors) != self._count:  # a plan applied since the count
                self._count = len(indexer.extractors)
                self._add_workers()
            return indexer

    def _work(self, i: int) -> None:
        while True:
            try:
                taken = self._take(i)
            except Exception as e:  # the catalog cannot be written (disk full): wait, then retry
                log.error("ingest paused: %s", e)
                time.sleep(_PAUSE_S)
                continue
            if taken is None:
                return
            job_id, video_id = taken.id, taken.video_id
            if taken.status == "failed":  # taken too often: its worker died each time
                self._given_up(taken)
                continue
            t0 = time.perf_counter()
            with self.catalog.holding(self._owner(i)):
                try:
                    self._run(i, job_id, video_id)
                    self._storage_tries.pop(job_id, None)
                except LeaseLost as e:  # another worker runs it now: leave it to that one
                    log.warning("job %s stopped: %s", job_id, e)
                except Exception as e:  # a bug fails this job, a full disk puts it aside
                    self._failed(i, job_id, video_id, e)
            with self._wake:
                self._running.pop(job_id, None)
                self.stats.busy_s += time.perf_counter() - t0
                if not self._running:
                    self._wake.notify_all()  # the actors may move now, a hold may begin

    def _run(self, i: int, job_id: str, video_id: int) -> None:
        video = self.catalog.get_video(video_id)
        if video is None:  # deleted while queued
            return
        path = video.media_path
        if path is None:  # a URL: fetch it first
            path = new_media_path(self.cfg, url_filename(video.source))
            self.catalog.update_job(job_id, "decoding", stage="fetching")
            try:
                sha, size = download(video.source, path, self.cfg)
            except (SourceError, OSError) as e:
                shutil.rmtree(path.parent, ignore_errors=True)
                return self._fail(job_id, video_id, f"fetching {video.source}: {e}")
            self.catalog.set_media(video_id, path, sha, size)
        elif video.sha256 is None or is_path_source(video):
            # a file:// path: hashed here, not while the client waited, and on every run: a
            # failed one's file may have been fixed or replaced since its last run
            try:
                with open(
                    open_video_file(video), "rb"
                ) as f:  # the file as checked, whatever its name is now
                    sha, size = (
                        hashlib.file_digest(f, "sha256").hexdigest(),
                        os.fstat(f.fileno()).st_size,
                    )
            except OSError as e:
                return self._fail(job_id, video_id, f"{path.name}: cannot read: {e.strerror}")
            self.catalog.set_media(video_id, path, sha, size)
        indexer = self._indexer()
        if i >= len(indexer.extractors):  # fewer extractors than when this worker took it
            with self._lock:  # back in the queue, for a worker that has one
                self._stalled.append((job_id, self._owner(i)))
            return
        result = indexer.run_job(
            indexer.extractors[i], path, video_id, job_id, follow_symlinks=not is_path_source(video)
        )
        if self.catalog.get_video(video_id) is None:  # deleted while it ran: leave nothing behind
            self.rt.shards.delete_video(video_id)
            self.catalog.delete_video(video_id)  # the texts its job wrote after the delete
            return
        with self._lock:
            if result.status == "ready":
                self.stats.jobs_ready += 1
                self.stats.frames_indexed += result.frames
            else:
                self.stats.jobs_failed += 1

    def _given_up(self, job: Job) -> None:
        """A job the catalog failed at its take (``job_max_attempts``): nothing of its runs
        stays in the shards, nor its words (a worker that died mid-video left some)."""
        log.error("job %s failed: %s", job.id, job.error)
        with self._lock:
            self.stats.jobs_failed += 1
        try:
            self.rt.shards.delete_video(job.video_id)
            for kind in TEXT_KINDS:
                self.catalog.put_texts(job.video_id, kind, [])
        except Exception as e:  # left for `vifusion check --repair`
            log.error("job %s: cannot clear what its runs left: %s", job.id, e)

    def _failed(self, i: int, job_id: str, video_id: int, e: Exception) -> None:
        reason = storage_reason(e)
        if reason is None:
            log.exception("job %s failed", job_id)
            return self._record_failure(
                job_id, video_id, f"internal error: {type(e).__name__}: {e}"
            )
        # The data dir refused a write: not the video's fault. The job waits for room (a
        # later run overwrites what this one sent: same vector ids), _STORAGE_TRIES at most.
        log.error("job %s: the data dir is %s: %s", job_id, reason, e)
        with self._lock:
            tries = self._storage_tries[job_id] = self._storage_tries.get(job_id, 0) + 1
            if tries < _STORAGE_TRIES:
                self._stalled.append((job_id, self._owner(i)))
        if tries >= _STORAGE_TRIES:
            self._record_failure(job_id, video_id, f"the data dir is {reason}: {e}")
        time.sleep(_PAUSE_S)

    def _record_failure(self, job_id: str, video_id: int, error: str) -> None:
        try:
            self._fail(job_id, video_id, error)
        except Exception as e:  # not even that can be written: the job runs again at the next start
            log.error("job %s: cannot record its failure (%s): %s", job_id, error, e)

    def _fail(self, job_id: str, video_id: int, error: str) -> None:
        with self._lock:
            self.stats.jobs_failed += 1
        if self.catalog.get_video(video_id) is not None:
            self.catalog.update_job(job_id, "failed", frames_indexed=0, error=error)
