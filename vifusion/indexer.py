"""Job orchestration: videos in, indexed frames out, every step recorded in the catalog.

The driver holds no features: extractor actors decode and embed, their node's aggregator
fuses and sends the batches straight to the shard actors; the driver only routes and
follows progress.
A job is ``ready`` only after its shard acknowledged every frame, and a shard
acknowledges a batch only once it is in its write-ahead log on disk.
"""

from __future__ import annotations

import hashlib
import queue
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import ray

from vifusion.catalog import Catalog
from vifusion.config import Config
from vifusion.extract.actor import start_extractors
from vifusion.fusion import start_aggregators
from vifusion.index import ShardSet, shard_for

VIDEO_SUFFIXES = frozenset(
    ".mp4 .m4v .mov .mkv .webm .avi .mpg .mpeg .ts .mts .flv .wmv .3gp .ogv".split()
)


@dataclass(frozen=True)
class IndexResult:
    """How one input ended: ``ready``, ``skipped`` (same content already indexed) or ``failed``."""

    path: str
    status: str
    video_id: int | None = None
    job_id: str | None = None
    frames: int = 0
    error: str | None = None


@dataclass(frozen=True)
class Progress:
    """One step of one job, for progress bars."""

    path: str
    frames_done: int
    frames_total: int


LIST_SUFFIXES = frozenset({".txt", ".list"})


def expand_paths(paths: Iterable[Path]) -> tuple[list[Path], list[IndexResult]]:
    """Files to index (folders searched recursively for video files; a ``.txt`` or ``.list``
    file names one path per line, relative to its own folder, ``#`` starting a comment), and
    the inputs that cannot even be tried, each with the reason."""
    files: list[Path] = []
    failed: list[IndexResult] = []
    for p in paths:
        p = Path(p)
        if p.is_file() and p.suffix.lower() in LIST_SUFFIXES:
            try:
                lines = p.read_text().splitlines()
            except (OSError, UnicodeDecodeError) as e:
                failed.append(IndexResult(str(p), "failed", error=f"{p}: cannot read the list: {e}"))
                continue
            listed = [p.parent / line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
            more, bad = expand_paths(x for x in listed if x.suffix.lower() not in LIST_SUFFIXES)
            files.extend(more)
            failed.extend(bad)
            failed.extend(IndexResult(str(x), "failed", error=f"{x}: a list inside a list ({p}) is not followed")
                          for x in listed if x.suffix.lower() in LIST_SUFFIXES)
        elif p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in VIDEO_SUFFIXES)
            if not found:
                failed.append(IndexResult(str(p), "failed", error=f"{p}: folder has no video files"))
            files.extend(found)
        elif p.is_file():
            files.append(p)
        elif p.exists():
            failed.append(IndexResult(str(p), "failed", error=f"{p}: not a regular file"))
        else:
            failed.append(IndexResult(str(p), "failed", error=f"{p}: no such file or folder"))
    return files, failed


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class Indexer:
    """Runs indexing jobs on a pool of extractor actors."""

    def __init__(self, cfg: Config, catalog: Catalog, shards: ShardSet) -> None:
        self.cfg = cfg
        self.catalog = catalog
        self.shards = shards
        self.aggregators = start_aggregators(cfg, shards.handles)
        self.extractors = start_extractors(cfg, self.aggregators)

    def index_files(
        self,
        files: list[Path],
        on_progress: Callable[[Progress | IndexResult], None] = lambda _: None,
    ) -> list[IndexResult]:
        """Index local files; one result per file, in input order. Content already
        indexed is skipped; a file that fails fails alone."""
        jobs: list[tuple[Path, int, str] | IndexResult] = []
        for path in files:
            try:
                sha = file_sha256(path)
            except OSError as e:
                jobs.append(IndexResult(str(path), "failed", error=f"{path}: cannot read: {e.strerror}"))
                continue
            if (seen := self.catalog.find_ready(sha)) is not None:
                jobs.append(IndexResult(str(path), "skipped", seen.id, frames=seen.frames_indexed))
                continue
            source = str(path.resolve())
            video_id, job_id = self.catalog.add_video(source, path.stem, sha256=sha, size_bytes=path.stat().st_size)
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
    ) -> IndexResult:
        """One video through one extractor; the catalog follows every step."""
        shard_no = shard_for(video_id, self.cfg.num_shards)
        self.catalog.update_job(job_id, "decoding")
        done, error = 0, None
        try:
            events = actor.index_video.options(num_returns="streaming").remote(video_id, str(path), shard_no)
            for ref in events:
                ev = ray.get(ref)
                if ev["event"] == "probed":
                    self.catalog.set_video_info(video_id, ev["duration_s"], ev["fps"], ev["width"], ev["height"])
                    on_progress(Progress(str(path), 0, ev["frames_total"]))
                elif ev["event"] == "progress":
                    done = ev["frames_done"]
                    progress = done / max(ev["frames_total"], 1)
                    self.catalog.update_job(job_id, "indexing", progress=progress, frames_indexed=done)
                    on_progress(Progress(str(path), done, ev["frames_total"]))
                elif ev["event"] == "done":
                    done = ev["frames"]
                elif ev["event"] == "failed":
                    error = ev["error"]
        except ray.exceptions.RayError as e:
            error = f"{path.name}: extractor failed: {type(e).__name__}"
        if error is None:
            self.catalog.update_job(job_id, "ready", frames_indexed=done)
            return IndexResult(str(path), "ready", video_id, job_id, frames=done)
        # Nothing of a failed video stays searchable.
        self.shards.delete_video(video_id)
        self.catalog.update_job(job_id, "failed", frames_indexed=0, error=error)
        return IndexResult(str(path), "failed", video_id, job_id, error=error)

    def close(self) -> None:
        for actor in [*self.extractors, *self.aggregators.values()]:
            ray.kill(actor)
        self.extractors, self.aggregators = [], {}
