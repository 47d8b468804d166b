"""The library behind the REST API: every operation a client can ask for, in-process.

The HTTP layer (``serve/app.py``) only parses, authenticates and formats; what it answers
comes from here, so the same calls can be made (and measured) without HTTP.
Holds the data dir's writer lock: one ``Service`` writes to a data dir at a time.
"""

from __future__ import annotations

import itertools
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from vifusion._files import StorageError, storage_writes
from vifusion.catalog import Job, Video
from vifusion.config import Config
from vifusion.jobs import JobRunner
from vifusion.media import thumbnail
from vifusion.runtime import Runtime
from vifusion.search import GROUP_BY
from vifusion.sources import (
    SNIFF_BYTES,
    SourceError,
    check_url,
    new_media_path,
    resolve_file_uri,
    safe_title,
    save_capped,
    sniff,
    url_filename,
)
from vifusion.types import Segment

MAX_OFFSET = 1000  # deepest result a cursor can reach


__all__ = ["Ingested", "NotFound", "SearchPage", "Service", "StorageError"]


class NotFound(LookupError):
    """No such video or job (or it was deleted)."""


@dataclass(frozen=True)
class Ingested:
    video_id: int
    job_id: str


@dataclass(frozen=True)
class SearchPage:
    results: list[Segment]
    next_offset: int | None
    missing_shards: tuple[int, ...] = ()  # shards that did not answer: a partial page


class Service:
    """Use as a context manager. Starts the ingest queue (resuming interrupted jobs)."""

    def __init__(self, cfg: Config, wait_s: float = 0.0) -> None:
        """``wait_s``: how long to wait for the data dir's previous writer to stop."""
        self.cfg = cfg
        self.rt = Runtime(cfg, writer=True, wait_s=wait_s)
        self.catalog = self.rt.catalog
        self.shards = self.rt.shards
        self.jobs = JobRunner(cfg, self.rt)

    @property
    def searcher(self):
        return self.rt.searcher

    # -- ingest ------------------------------------------------------------------------

    def ingest_upload(
        self, data: BinaryIO, filename: str | None, title: str | None = None, metadata: dict[str, Any] | None = None
    ) -> Ingested:
        """Store an uploaded video under the data dir and queue its job. Refuses (SourceError)
        an empty upload, one over the size limit, and one that is plainly not a video."""
        self._check_metadata(metadata)
        head = data.read(SNIFF_BYTES)
        if not head:
            raise SourceError("empty_file", "the upload is empty (0 bytes)")
        if (why := sniff(head)) is not None:
            raise SourceError("unsupported_media_type", f"{filename or 'upload'}: {why}", 415)
        with storage_writes(self.cfg.data_dir, "the upload was not stored"):
            path = new_media_path(self.cfg, filename)
        try:
            chunks = itertools.chain([head], iter(lambda: data.read(1 << 20), b""))
            with storage_writes(self.cfg.data_dir, "the upload was not stored"):
                sha, size = save_capped(chunks, path, self.cfg.max_upload_bytes, "the upload")
            return self._queue(f"upload:{filename or path.name}", safe_title(title or filename, path.stem),
                               metadata, sha, size, media=path)
        except BaseException:
            shutil.rmtree(path.parent, ignore_errors=True)
            raise

    def ingest_uri(self, uri: str, title: str | None = None, metadata: dict[str, Any] | None = None) -> Ingested:
        """Queue a ``file://`` path (inside the ingest roots) or an ``http(s)://`` URL
        (public addresses only unless configured). Only checks here: the job fetches a URL
        and hashes the file, so a large one does not hold up the answer."""
        self._check_metadata(metadata)
        if uri.startswith("file:"):
            path = resolve_file_uri(uri, self.cfg.ingest_roots)
            return self._queue(str(path), safe_title(title or path.name, "video"), metadata, None, None)
        check_url(uri, self.cfg.allow_private_urls)
        return self._queue(uri, safe_title(title or url_filename(uri), "video"), metadata, None, None)

    def _queue(self, source, title, metadata, sha, size, media: Path | None = None) -> Ingested:
        with storage_writes(self.cfg.data_dir, "the video was not queued"):
            video_id, job_id = self.catalog.add_video(source, title, metadata, sha256=sha, size_bytes=size, media=media)
        self.jobs.wake()
        return Ingested(video_id, job_id)

    def _check_metadata(self, metadata: dict[str, Any] | None) -> None:
        if metadata is None:
            return
        if not isinstance(metadata, dict):
            raise SourceError("invalid_metadata", "metadata must be a JSON object")
        size = len(json.dumps(metadata))
        if size > self.cfg.max_metadata_bytes:
            raise SourceError(
                "metadata_too_large", f"metadata is {size} bytes as JSON; the limit is {self.cfg.max_metadata_bytes}", 413
            )

    # -- reads -------------------------------------------------------------------------

    def job(self, job_id: str) -> Job:
        job = self.catalog.get_job(job_id)
        if job is None:
            raise NotFound(f"no job {job_id}")
        return job

    def video(self, video_id: int) -> Video:
        video = self.catalog.get_video(video_id)
        if video is None:
            raise NotFound(f"no video {video_id}")
        return video

    def videos(self, limit: int, after_id: int = 0) -> tuple[list[Video], int | None]:
        """A page of videos in id order, and the id to continue after (None: last page)."""
        page = self.catalog.list_videos(limit + 1, after_id)
        more = len(page) > limit
        page = page[:limit]
        return page, (page[-1].id if more else None)

    def media_path(self, video_id: int) -> Path:
        return self._media(self.video(video_id))

    @staticmethod
    def _media(video: Video) -> Path:
        path = video.media_path
        if path is None or not path.is_file():
            raise NotFound(f"video {video.id} has no stored media")
        return path

    def thumbnail(self, video_id: int, t: float) -> bytes:
        """A JPEG of video ``video_id`` at ``t`` seconds (clamped to its length)."""
        video = self.video(video_id)
        path = self._media(video)
        if video.duration_s:
            t = min(t, max(0.0, video.duration_s - 1.0 / (video.fps or 25.0)))
        return thumbnail(path, t, self.cfg.data_dir / "thumbs" / str(video_id))

    # -- delete ------------------------------------------------------------------------

    def delete(self, video_id: int) -> None:
        """Forget a video: catalog first (searches stop returning it at once), then its
        vectors, its stored media and its thumbnails."""
        video = self.video(video_id)
        with storage_writes(self.cfg.data_dir, "the video was not deleted"):
            self.catalog.delete_video(video_id)
        # Searches no longer return it; vectors a full shard could not drop are orphans that
        # `vifusion check --repair` removes.
        with storage_writes(self.cfg.data_dir, "the video is deleted, but its vectors stay until `vifusion check --repair`"):
            self.shards.delete_video(video_id)
        media = self.cfg.data_dir / "media"
        if video.media and Path(video.media).parent.parent == media:  # only files the service stored itself
            shutil.rmtree(Path(video.media).parent, ignore_errors=True)
        shutil.rmtree(self.cfg.data_dir / "thumbs" / str(video_id), ignore_errors=True)

    # -- search ------------------------------------------------------------------------

    def search(
        self,
        *,
        text: str | None = None,
        image: np.ndarray | None = None,
        clip: Path | None = None,
        stored_clip: tuple[int, float, float] | None = None,
        top_k: int = 10,
        group_by: str = "segment",
        filter: dict[str, Any] | None = None,
        min_score: float | None = None,
        offset: int = 0,
    ) -> SearchPage:
        """Moments for exactly one query kind, best first, ``top_k`` from ``offset``.

        Only ready videos are returned; ``filter`` keeps videos whose metadata has each
        key -> value; ``min_score`` drops weaker moments.
        """
        given = [q for q in (text, image, clip, stored_clip) if q is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of text, image, clip, or video_id + start_s + end_s")
        if not 1 <= top_k <= 100:
            raise ValueError(f"top_k must be between 1 and 100, got {top_k}")
        if group_by not in GROUP_BY:
            raise ValueError(f"group_by must be one of {', '.join(GROUP_BY)}")
        if not 0 <= offset <= MAX_OFFSET:
            raise ValueError(f"cursor goes past result {MAX_OFFSET}")
        videos = None if not filter else sorted(self.catalog.ready_ids(metadata=filter))
        want = offset + top_k + 1
        s = self.searcher
        if text is not None:
            found = s.text(text, want, group_by, videos)
        elif image is not None:
            found = s.image(image, want, group_by, videos)
        elif clip is not None:
            found = s.clip(clip, want, group_by, videos)
        else:
            video_id, start_s, end_s = stored_clip
            self.video(video_id)
            found = s.stored_clip(video_id, start_s, end_s, want, group_by, videos)
        missing = found.missing
        ready = self.catalog.ready_ids(sorted({m.video_id for m in found}))
        found = [m for m in found if m.video_id in ready and (min_score is None or m.score >= min_score)]
        page = found[offset : offset + top_k]
        more = len(found) > offset + top_k and offset + top_k <= MAX_OFFSET
        return SearchPage(page, offset + top_k if more else None, missing)

    # -- state -------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        stats = self.shards.stats()
        return {"status": "ok", "shards": len(stats), "vectors": sum(s["vectors"]["visual"] for s in stats)}

    def stats(self) -> dict[str, Any]:
        """Figures for monitoring: shards, ingest, transfers, catalog."""
        return {
            "shards": self.shards.stats(),
            "ingest": self.jobs.stats,
            "fusion": self.jobs.fusion_stats(),
            "videos": self.catalog.counts(),
        }

    def close(self) -> None:
        self.jobs.close()
        self.rt.close()

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
