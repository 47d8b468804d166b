"""The library behind the REST API: every operation a client can ask for, in-process.

The HTTP layer (``serve/``) only parses, authenticates and formats; what it answers
comes from here, so the same calls can be made (and measured) without HTTP.
Holds the data dir's writer lock (``Runtime``): alone on one machine; with
``cfg.shared_actors``, shared with the other API replicas on the same Ray, which use the same
shard replicas and the same ingest pool (``vifusion/ingest/pool.py``): any number of them accept
videos, and the pool runs every job once.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from vifusion._files import StorageError, fd_path, spool_dir, storage_writes
from vifusion.catalog import DEFAULT_COLLECTION, TEXT_KINDS, Job, TextRow, Video
from vifusion.config import Config
from vifusion.datadir import THUMBS, remove_stored_media
from vifusion.index.model import model_record
from vifusion.ingest._checks import check_metadata, check_text, shown, title_for
from vifusion.ingest.pool import Pool
from vifusion.ingest.sources import (
    SNIFF_BYTES,
    SourceError,
    check_url,
    new_media_path,
    open_video_file,
    refuse_non_video,
    resolve_file_uri,
    save_capped,
    sniff,
    url_filename,
)
from vifusion.query.options import MAX_OFFSET, check_search
from vifusion.query.ranking import Moment, relative_cut
from vifusion.query.searcher import BLEND, MODALITIES
from vifusion.query.thumbnails import ThumbnailCache, frame_time
from vifusion.runtime import Runtime

__all__ = ["Ingested", "NotFound", "SearchPage", "Service", "StorageError"]


class NotFound(LookupError):
    """No such video or job (or it was deleted)."""


@dataclass(frozen=True)
class Ingested:
    video_id: int
    job_id: str


@dataclass(frozen=True)
class SearchPage:
    results: list[Moment]
    next_offset: int | None
    missing_shards: tuple[int, ...] = ()  # shards that did not answer: a partial page


class Service:
    """Everything the REST API does, in-process. Use it as a context manager: it starts Ray
    (or joins ``cfg.ray_address``), takes the data dir's writer lock and starts the ingest
    pool, or finds the running one (which resumes interrupted jobs); leaving the block stops
    what it started, unless shared. Ingest, then search::

        import time

        from vifusion.config import Config
        from vifusion.service import Service

        with Service(Config(data_dir="vifusion-data")) as svc, open("holiday.mp4", "rb") as f:
            queued = svc.ingest_upload(f, "holiday.mp4", title="Holiday")
            while svc.job(queued.job_id).status not in ("ready", "failed"):
                time.sleep(0.5)
            for m in svc.search(text="a cat on a sofa", top_k=3).results:
                print(m.video_id, m.start_s, m.end_s, round(m.score, 3))
    """

    def __init__(self, cfg: Config, wait_s: float = 0.0) -> None:
        """``wait_s``: how long to wait for the data dir's previous writer to stop."""
        self.cfg = cfg
        self.rt = Runtime(cfg, writer=True, wait_s=wait_s, shared=True)
        self.catalog = self.rt.catalog
        try:
            with storage_writes(cfg.data_dir, "the service did not start"):
                self.spool = spool_dir(cfg.data_dir)  # where the API spools what it is sent
            self.jobs = Pool(cfg)  # the data dir's ingest pool (vifusion/ingest/pool.py)
        except BaseException:
            self.rt.close()
            raise
        self.thumbnails = ThumbnailCache(cfg.data_dir / THUMBS, cfg.thumbnail_cache_bytes)

    @property
    def shards(self):
        """The shard set in use (a reindex's switch is followed here: ``Runtime.follow_index``)."""
        self.rt.follow_index()
        return self.rt.shards

    @property
    def searcher(self):
        """The query models and the shards they search, of the shard set in use."""
        self.rt.follow_index()
        return self.rt.searcher

    # -- ingest ------------------------------------------------------------------------

    def ingest_upload(
        self,
        data: BinaryIO,
        filename: str | None,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        collection: str = DEFAULT_COLLECTION,
    ) -> Ingested:
        """Store an uploaded video under the data dir and queue its job, in ``collection``.
        Refuses (SourceError) an empty upload, one over the size limit, and one that is
        plainly not a video."""
        check_metadata(metadata, self.cfg)
        title = title_for(title, filename)
        head = data.read(SNIFF_BYTES)
        refuse_non_video(head, filename or "the upload")
        with storage_writes(self.cfg.data_dir, "the upload was not stored"):
            path = new_media_path(self.cfg, filename)
        try:
            chunks = itertools.chain([head], iter(lambda: data.read(1 << 20), b""))
            with storage_writes(self.cfg.data_dir, "the upload was not stored"):
                sha, size = save_capped(chunks, path, self.cfg.max_upload_bytes, "the upload")
            return self._queue(
                f"upload:{filename or path.name}", title, metadata, sha, size, collection, path
            )
        except BaseException:
            shutil.rmtree(path.parent, ignore_errors=True)
            raise

    def ingest_uri(
        self,
        uri: str,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        collection: str = DEFAULT_COLLECTION,
    ) -> Ingested:
        """Queue a ``file://`` path (inside the ingest roots) or an ``http(s)://`` URL
        (public addresses only unless configured), in ``collection``. Only checks here: the
        job fetches a URL and hashes the file, so a large one does not hold up the answer."""
        check_text("uri", uri, one_line=True)
        check_metadata(metadata, self.cfg)
        if uri.startswith("file:"):
            path = resolve_file_uri(uri, self.cfg.ingest_roots)
            title = title_for(title, path.name)
            return self._queue(str(path), title, metadata, None, None, collection)
        check_url(uri, self.cfg.allow_private_urls)
        title = title_for(title, url_filename(uri))
        return self._queue(uri, title, metadata, None, None, collection)

    def _queue(
        self, source, title, metadata, sha, size, collection: str, media: Path | None = None
    ) -> Ingested:
        with storage_writes(self.cfg.data_dir, "the video was not queued"):
            video_id, job_id = self.catalog.add_video(
                source, title, metadata, sha, size, media, collection
            )
        self.jobs.wake()
        return Ingested(video_id, job_id)

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
        return shown(video, self.cfg)

    def videos(
        self, limit: int, after_id: int = 0, collections: Sequence[str] | None = None
    ) -> tuple[list[Video], int | None]:
        """A page of videos in id order (only ``collections``' when given), and the id to
        continue after (None: last page)."""
        page = self.catalog.list_videos(limit + 1, after_id, collections)
        more = len(page) > limit
        page = [shown(v, self.cfg) for v in page[:limit]]
        return page, (page[-1].id if more else None)

    def playable(self, video_id: int) -> Video:
        """The video, if its file may be served: the decoder has probed it as a video (it is
        ready, or was probed before it failed or while it is indexed again). Before that the
        file is only what a client named or sent, so serving it would hand out any file under
        the ingest roots. SourceError 409 ``not_playable`` otherwise, with the video's state."""
        video = self.video(video_id)
        if video.status != "ready" and video.width is None:  # set_video_info: a video stream
            state = (
                f"failed ({video.error})"
                if video.status == "failed"
                else f"{video.status}, not decoded yet"
            )
            raise SourceError(
                "not_playable",
                f"video {video_id} is {state}: only a file decoded as a video is served",
                409,
            )
        return video

    def open_media(self, video_id: int) -> tuple[int, Path]:
        """A read-only descriptor of the video's file, and its path (for its name); the caller
        closes it. SourceError 409 unless ``playable``, or if the file's first bytes are no
        longer a video's (a ``file://`` path written over since); NotFound if there is none,
        or if a ``file://`` video's path is now a symlink, a FIFO or a device
        (``open_video_file``): serving reads the file that was checked."""
        video = self.playable(video_id)
        fd = self._open(video)
        try:
            if (why := sniff(os.pread(fd, SNIFF_BYTES, 0))) is not None:
                raise SourceError(
                    "not_playable",
                    f"video {video_id}'s file no longer looks like a video ({why}); not served",
                    409,
                )
        except BaseException:
            os.close(fd)
            raise
        return fd, video.media_path

    @staticmethod
    def _open(video: Video) -> int:
        try:
            return open_video_file(video)
        except OSError as e:
            raise NotFound(f"video {video.id} has no stored media: {e.strerror}") from None

    def thumbnail(self, video_id: int, t: float) -> bytes:
        """A JPEG of video ``video_id`` at ``t`` seconds; PastEnd past the video's end, so
        that no time a client makes up costs a decode and a cache entry."""
        video = self.video(video_id)
        t = frame_time(video, t)
        fd = self._open(video)  # the checked file, as /media serves it: never a FIFO swapped in
        try:
            return self.thumbnails.get(video_id, Path(fd_path(fd)), t)
        finally:
            os.close(fd)

    # -- delete ------------------------------------------------------------------------

    def delete(self, video_id: int) -> None:
        """Forget a video: catalog first (searches stop returning it at once), then its
        vectors, its stored media and its thumbnails."""
        video = self.video(video_id)
        with storage_writes(self.cfg.data_dir, "the video was not deleted"):
            self.catalog.delete_video(video_id)
        # Searches no longer return it; vectors a full shard could not drop are orphans that
        # `vifusion check --repair` removes.
        with storage_writes(
            self.cfg.data_dir,
            "the video is deleted, but its vectors stay until `vifusion check --repair`",
        ):
            self.shards.delete_video(video_id)
        remove_stored_media(self.cfg.data_dir, video.media)
        self.thumbnails.drop(video_id)

    def delete_collection(self, name: str) -> list[int]:
        """Delete every video of collection ``name`` through ``delete`` (catalog, vectors,
        media, thumbnails); the ids deleted. A job still running for one of them finds its
        video gone when it ends and deletes what it indexed (``ingest/jobs.py``); a video
        added to the collection meanwhile is kept."""
        deleted = []
        for video_id in self.catalog.collection_video_ids(name):
            try:
                self.delete(video_id)
            except NotFound:  # deleted meanwhile by another caller
                continue
            deleted.append(video_id)
        return deleted

    # -- retry -------------------------------------------------------------------------

    def retry(self, video_id: int) -> str:
        """Queue a failed video again; its new job's id. Refused (SourceError): 409
        ``not_failed`` for a video that has not failed (queued, running or ready: a second job
        would index it twice), 410 ``source_gone`` for one whose file is no longer there (a
        ``file://`` path moved or deleted): that run could only fail again. A URL whose fetch
        failed is fetched again. Only a video still failed is requeued, so two retries at once
        make one job."""
        video = self.video(video_id)
        if video.status != "failed":
            raise SourceError(
                "not_failed",
                f"video {video_id} is {video.status}; only a failed video is retried",
                409,
            )
        if video.media_path is not None:
            try:
                os.close(open_video_file(video))
            except OSError as e:
                raise SourceError(
                    "source_gone",
                    f"video {video_id}'s file {video.media_path.name} cannot be "
                    f"read ({e.strerror}): add the video again",
                    410,
                ) from None
        with storage_writes(self.cfg.data_dir, "the video was not queued"):
            job_id = self.catalog.requeue(
                video_id, f"retrying; the last run failed: {video.error}", if_status="failed"
            )
        if job_id is None:  # deleted or retried since it was read
            video = self.video(video_id)
            raise SourceError(
                "not_failed",
                f"video {video_id} is {video.status}; only a failed video is retried",
                409,
            )
        self.jobs.wake()
        return job_id

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
        modalities: Sequence[str] = MODALITIES,
        min_relative_score: float | None = None,
        languages: Sequence[str] | None = None,
        fusion: str | None = None,
        collections: Sequence[str] | None = None,
    ) -> SearchPage:
        """Moments for exactly one query kind, best first, ``top_k`` from ``offset``, of ready
        videos only. ``filter`` keeps videos whose metadata has each key -> value;
        ``languages`` (ISO 639-1) videos in which one of them is spoken; ``collections``
        videos in one of them (None: every one), searched inside the shards, so ``top_k``
        stays full however much the other collections hold;
        ``min_score`` drops weaker moments, ``min_relative_score`` (None: the config's; 0:
        off) those under that fraction of the whole ranking's best, so every page agrees on
        the cut. A text query searches ``modalities``, blended by ``fusion`` (one of ``BLENDS``;
        None: the default); an image or a clip what is seen (so
        its ``modalities`` must include visual)."""
        if min_relative_score is None:
            min_relative_score = self.cfg.min_relative_score
        queries = sum(q is not None for q in (text, image, clip, stored_clip))
        modalities = check_search(
            queries, text is not None, top_k, group_by, offset, min_relative_score, modalities
        )
        videos = None
        if filter or languages is not None or collections is not None:
            langs = None if languages is None else list(languages)
            videos = sorted(self.catalog.ready_ids(None, filter, langs, collections))
        want = offset + top_k + 1
        s = self.searcher
        if text is not None:
            found = s.text(text, want, group_by, videos, modalities, fusion or BLEND)
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
        found = [
            m for m in found if m.video_id in ready and (min_score is None or m.score >= min_score)
        ]
        found = relative_cut(found, min_relative_score)
        page = found[offset : offset + top_k]
        more = len(found) > offset + top_k and offset + top_k <= MAX_OFFSET
        return SearchPage(page, offset + top_k if more else None, missing)

    def transcript(self, video_id: int, kind: str = "speech") -> list[TextRow]:
        """What is said (``kind`` "speech"), written on screen ("screen") or both ("all") in
        a video, in time order. NotFound for no such video; ValueError for another kind."""
        if kind not in (*TEXT_KINDS, "all"):
            raise ValueError(f"kind must be one of {', '.join((*TEXT_KINDS, 'all'))}, got {kind!r}")
        self.video(video_id)
        return self.catalog.texts(video_id, None if kind == "all" else kind)

    # -- reindex -----------------------------------------------------------------------

    def reindex(self) -> dict[str, Any]:
        """Embed the library again with the configured ``visual_model`` in the background
        (``ingest/live_reindex.py``): searches answer from the vectors in use until the switch.
        Refused before it starts: ValueError for a malformed model, FileNotFoundError for
        missing weights, ``ReindexBusy`` while one runs."""
        model_record(self.cfg.visual_model)
        self.jobs.reindex(self.cfg.visual_model)
        return self.reindex_state()

    def reindex_state(self) -> dict[str, Any]:
        """The last reindex's state, the model the index holds and the one configured."""
        return self.jobs.reindex_state() | {"configured_model": self.cfg.visual_model}

    # -- state -------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        stats = self.shards.stats()
        return {
            "status": "ok",
            "shards": len(stats),
            "vectors": sum(s["vectors"]["visual"] for s in stats),
        }

    def stats(self) -> dict[str, Any]:
        """Figures for monitoring: shards, ingest, transfers, catalog."""
        return {
            "shards": self.shards.stats(),
            "ingest": self.jobs.stats,
            "fusion": self.jobs.fusion_stats(),
            "videos": self.catalog.counts(),
        }

    def close(self) -> None:
        """Let go of the data dir; the shard replicas and the ingest pool stop with it unless
        they are shared (``cfg.shared_actors``: the other API replicas go on with them)."""
        self.jobs.close()
        self.rt.close()

    def shutdown(self) -> None:
        """Close, and stop the shared shard replicas and ingest pool too: the end of a
        cluster's whole service (every API replica on this data dir stops working)."""
        self.jobs.shutdown()
        self.shards.shutdown()
        self.close()

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
