"""Job orchestration: videos in, indexed frames out, every step recorded in the catalog.

The driver holds no features: extractors decode and embed, their node's aggregator sends
the batches to the shards; the driver routes and follows progress. A job is ``ready`` only
once its shard acknowledged every row (in its write-ahead log) and its texts' words are in
the catalog. A job names its stage as it goes and keeps the extractor's warnings; an
extractor call past its deadline (``_Deadline``) fails its video and restarts the extractor.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ray

from vifusion._files import StorageError, storage_reason
from vifusion.catalog import DEFAULT_COLLECTION, TEXT_KINDS, Catalog
from vifusion.config import Config
from vifusion.extract._spool import ship
from vifusion.extract.actor import start_extractors
from vifusion.extract.decode import DecodeError
from vifusion.fusion import start_aggregators
from vifusion.index import ShardSet, shard_for
from vifusion.ingest.inputs import IndexResult, Progress, file_sha256

_RETRIES = 2  # more tries for a video whose extractor or aggregator died under it
log = logging.getLogger(__name__)


class Indexer:
    """Runs indexing jobs on a pool of extractor actors."""

    def __init__(self, cfg: Config, catalog: Catalog, shards: ShardSet) -> None:
        if cfg.plan is not None:  # the applied plan's fusion size limits
            cfg = cfg.updated({k: cfg.plan[k] for k in ("fusion_min_bytes", "fusion_max_bytes")})
        self.cfg = cfg
        self.catalog = catalog
        self.shards = shards
        self.aggregators = start_aggregators(cfg, shards.handles)
        self.extractors = start_extractors(cfg, self.aggregators)
        self._node = ray.get_runtime_context().get_node_id()

    def index_files(
        self,
        files: list[Path],
        on_progress: Callable[[Progress | IndexResult], None] = lambda _: None,
        collection: str = DEFAULT_COLLECTION,
    ) -> list[IndexResult]:
        """Index local files into ``collection``; one result per file, in input order.
        Content already indexed in that collection is skipped; a file that fails fails alone."""
        jobs: list[tuple[Path, int, str] | IndexResult] = []
        for path in files:
            try:
                sha = file_sha256(path)
            except OSError as e:
                jobs.append(
                    IndexResult(str(path), "failed", error=f"{path}: cannot read: {e.strerror}")
                )
                continue
            if (seen := self.catalog.find_ready(sha, collection)) is not None:
                jobs.append(IndexResult(str(path), "skipped", seen.id, frames=seen.frames_indexed))
                continue
            source = str(path.resolve())
            video_id, job_id = self.catalog.add_video(
                source,
                path.stem,
                sha256=sha,
                size_bytes=path.stat().st_size,
                collection=collection,
            )
            jobs.append((path, video_id, job_id))

        idle: queue.Queue = queue.Queue()
        for actor in self.extractors:
            idle.put(actor)

        def run(job: tuple[Path, int, str] | IndexResult) -> IndexResult:
            if isinstance(job, IndexResult):
                on_progress(job)
                return job
            actor = idle.get()
            try:
                result = self.run_job(actor, *job, on_progress=on_progress)
            finally:
                idle.put(actor)
            on_progress(result)
            return result

        with ThreadPoolExecutor(max_workers=len(self.extractors)) as pool:
            return list(pool.map(run, jobs))

    def run_job(
        self,
        actor: ray.actor.ActorHandle,
        path: Path,
        video_id: int,
        job_id: str,
        on_progress: Callable[[Progress | IndexResult], None] = lambda _: None,
        follow_symlinks: bool = True,
    ) -> IndexResult:
        """One video through one extractor; the catalog follows every step. A video whose
        extractor or node aggregator died is indexed again from its start (``_RETRIES``
        times), after what reached the shards of it is deleted: each frame once.
        ``follow_symlinks``: False for a path stored resolved (see ``open_regular``)."""
        shard_no = shard_for(video_id, self.cfg.num_shards)
        # A video indexed before (a requeue, a run a crash cut short) starts from nothing: its
        # rows come again under the same ids, and none of the last run's outlives it (a
        # transcript with fewer segments this time, say). Not if another worker took the job over.
        self.catalog.check_lease(job_id)
        self.shards.delete_video(video_id)
        for attempt in range(_RETRIES + 1):
            warnings: list[str] = []
            done, error, retry = self._attempt(
                actor, path, video_id, job_id, shard_no, on_progress, follow_symlinks, warnings
            )
            if not retry or attempt == _RETRIES:
                break
            log.warning("%s; indexing it again", error)
            _wait_restarted(actor)
            self._abandon(video_id)
            self.catalog.check_lease(job_id)  # taken over meanwhile: its vectors are not ours
            self.shards.delete_video(video_id)
        if error is None:
            self.catalog.update_job(job_id, "ready", frames_indexed=done, warnings=warnings)
            return IndexResult(
                str(path), "ready", video_id, job_id, frames=done, warnings=tuple(warnings)
            )
        # Nothing of a failed video stays searchable.
        self.catalog.check_lease(job_id)
        self.shards.delete_video(video_id)
        for kind in TEXT_KINDS:
            self.catalog.put_texts(video_id, kind, [])
        self.catalog.update_job(job_id, "failed", frames_indexed=0, error=error, warnings=warnings)
        return IndexResult(
            str(path), "failed", video_id, job_id, error=error, warnings=tuple(warnings)
        )

    def _attempt(
        self,
        actor: ray.actor.ActorHandle,
        path: Path,
        video_id: int,
        job_id: str,
        shard_no: int,
        on_progress: Callable[[Progress | IndexResult], None],
        follow_symlinks: bool,
        warnings: list[str],
    ) -> tuple[int, str | None, bool]:
        """One try: (frames done, error or None, whether the error is worth another try); the
        extractor's warnings are added to ``warnings``, its texts written to the catalog."""
        self.catalog.update_job(
            job_id, "decoding", progress=0.0, frames_indexed=0, stage="probing", warnings=[]
        )
        done = 0
        try:
            # Its models are loaded: the deadline counts this video alone.
            node = ray.get(actor.node_id.remote())
            # Nodes share no disk: an extractor elsewhere gets the file through Ray.
            chunks = None if node == self._node else ship(path, follow_symlinks)
            deadline = _Deadline(self.cfg)
            events = actor.index_video.options(num_returns="streaming").remote(
                video_id, str(path), shard_no, follow_symlinks, chunks
            )
            while True:
                if deadline.left_s() == 0 or not ray.wait([events], timeout=deadline.left_s())[0]:
                    self._restart(actor, video_id)
                    return (
                        done,
                        f"{path.name}: {deadline.reason()}; the extractor was restarted",
                        False,
                    )
                try:
                    ev = ray.get(next(events))
                except StopIteration:
                    break
                if ev["event"] == "probed":
                    deadline.scale(ev["duration_s"])
                    self._note(
                        self.catalog.set_video_info,
                        video_id,
                        ev["duration_s"],
                        ev["fps"],
                        ev["width"],
                        ev["height"],
                    )
                    on_progress(Progress(str(path), 0, ev["frames_total"]))
                elif ev["event"] == "progress":
                    done = ev["frames_done"]
                    progress = done / max(ev["frames_total"], 1)
                    self._note(
                        self.catalog.update_job,
                        job_id,
                        "indexing",
                        progress=progress,
                        frames_indexed=done,
                    )
                    on_progress(Progress(str(path), done, ev["frames_total"]))
                elif ev["event"] == "stage":
                    self._note(
                        self.catalog.update_job,
                        job_id,
                        "indexing",
                        stage=ev["stage"],
                        warnings=warnings,
                    )
                elif ev["event"] == "warning":
                    warnings.append(ev["warning"])
                    self._note(self.catalog.update_job, job_id, "indexing", warnings=warnings)
                elif (
                    ev["event"] == "texts"
                ):  # before "done": a ready video's words are all in the catalog
                    self.catalog.put_texts(video_id, ev["kind"], ev["rows"])
                    if ev["kind"] == "speech":
                        self.catalog.set_video_language(video_id, ev.get("language"))
                elif ev["event"] == "done":
                    return ev["frames"], None, False
                elif ev["event"] == "failed":
                    if ev.get("storage"):  # the data dir, not the video: the caller decides
                        raise StorageError(
                            ev["storage"], f"the data dir is {ev['storage']}: {ev['error']}"
                        )
                    return done, ev["error"], bool(ev.get("retry"))
        except DecodeError as e:  # no file to ship (the extractor's open would say the same)
            return done, str(e), False
        except ray.exceptions.RayActorError as e:  # the extractor died; Ray restarts it
            return done, f"{path.name}: extractor failed: {type(e).__name__}", True
        except ray.exceptions.RayError as e:
            return done, f"{path.name}: extractor failed: {type(e).__name__}", False
        return done, f"{path.name}: the extractor ended without a result", True

    def _restart(self, actor: ray.actor.ActorHandle, video_id: int) -> None:
        """Kill an extractor that is past its deadline (whatever holds it: a decoder that hangs,
        a hand-over that never returns) and wait for Ray to start it again; drop what the
        aggregators hold of its video."""
        ray.kill(actor, no_restart=False)
        _wait_killed_and_back(actor)
        self._abandon(video_id)

    def _abandon(self, video_id: int) -> None:
        for aggregator in self.aggregators.values():
            with contextlib.suppress(ray.exceptions.RayError):
                ray.get(aggregator.abandon.remote(video_id))

    @staticmethod
    def _note(write: Callable[..., object], *args: object, **kwargs: object) -> None:
        """A progress write to the catalog. A full data dir does not stop the video midway
        (the extractor would go on sending rows of it that nobody waits for): the stream is
        read to its end, and the job's last write says whether it stuck."""
        try:
            write(*args, **kwargs)
        except Exception as e:
            if storage_reason(e) is None:
                raise
            log.warning("progress not recorded: %s", e)

    def close(self) -> None:
        for actor in [*self.extractors, *self.aggregators.values()]:
            ray.kill(actor)
        self.extractors, self.aggregators = [], {}


class _Deadline:
    """How long one extractor call may take, from its start: ``extract_deadline_base_s`` to
    probe the video, and that plus ``extract_deadline_per_video_s`` x its duration in all."""

    def __init__(self, cfg: Config) -> None:
        self.base_s, self.per_video_s = (
            cfg.extract_deadline_base_s,
            cfg.extract_deadline_per_video_s,
        )
        self.limit_s = self.base_s
        self.duration_s: float | None = None
        self.start = time.monotonic()

    def scale(self, duration_s: float) -> None:
        self.duration_s = duration_s
        self.limit_s = self.base_s + self.per_video_s * duration_s

    def left_s(self) -> float:
        return max(0.0, self.start + self.limit_s - time.monotonic())

    def reason(self) -> str:
        if self.duration_s is None:
            return (
                f"extraction took longer than {self.limit_s:.1f} s without even probing the video"
            )
        return (
            f"extraction took longer than {self.limit_s:.1f} s, its deadline ({self.base_s:g} s + "
            f"{self.per_video_s:g} s per second of its {self.duration_s:.1f} s of video)"
        )


def _wait_killed_and_back(actor: ray.actor.ActorHandle, timeout_s: float = 300.0) -> None:
    """Return once an extractor killed with a restart answers again: until then calls fail,
    while the old process dies and while the new one loads its models."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.device.remote(), timeout=max(deadline - time.monotonic(), 0.1))
            return
        except ray.exceptions.RayActorError:
            time.sleep(0.5)
        except ray.exceptions.GetTimeoutError:
            return  # the next video's call fails with the reason


def _wait_restarted(actor: ray.actor.ActorHandle, timeout_s: float = 300.0) -> None:
    """Return once a restarting actor answers (an extractor reloads its models first); a call
    meanwhile fails at once rather than waiting."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            ray.get(actor.device.remote(), timeout=max(deadline - time.monotonic(), 0.1))
            return
        except ray.exceptions.ActorUnavailableError:
            if time.monotonic() > deadline:
                return  # the retry fails with the reason
            time.sleep(0.5)
        except ray.exceptions.RayError:
            return
