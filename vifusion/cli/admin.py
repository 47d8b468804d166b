"""What `vifusion list`, `delete` and `status` read and change in a data dir, without Ray.

The catalog is read with a read-only connection and the shards as readers (snapshot + log,
nothing written), so these run beside a service or an indexing run. A delete without a
service takes the data dir's writer lock, as every writer does, and opens only the shard
that holds the video, as its writer: the same logged, synced delete that shard's actor makes.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from typing import Any

from vifusion import datadir
from vifusion.catalog import Catalog, Job, Video, open_catalog
from vifusion.cli._catalog_admin import local_time
from vifusion.config import Config
from vifusion.index.layout import built_shards, refuse_other_count, shard_dir, shard_for

RUNNING = ("decoding", "indexing")  # job states of a job being worked on
RECENT_FAILURES = 5  # failed jobs `vifusion status` names, the latest first


def all_videos(catalog: Catalog, status: str | None = None) -> list[Video]:
    """Every video in id order (``status``: only those in it)."""
    out: list[Video] = []
    after = 0
    while page := catalog.list_videos(500, after):
        out += [v for v in page if status is None or v.status == status]
        after = page[-1].id
    return out


def video_row(v: Video) -> dict[str, Any]:
    """A video as `vifusion list --json` prints it."""
    return {
        "video_id": v.id,
        "status": v.status,
        "duration_s": v.duration_s,
        "frames": v.frames_indexed,
        "title": v.title,
        "source": v.source,
        "added": local_time(v.created_at),
        "error": v.error,
    }


# -- delete ---------------------------------------------------------------------------


class Deleter:
    """Deletes videos from a data dir whose writer lock (``datadir.writer_lock``) the caller
    holds: catalog first (a search stops finding the video at once), then its rows in its
    shard (logged and synced), then the media the data dir stored for it and its thumbnails.
    Shards are opened as they are needed, each once."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.catalog = open_catalog(cfg)
        self._built = built_shards(cfg.data_dir)
        if self._built is not None:
            refuse_other_count(cfg.data_dir, self._built, cfg.num_shards)
        self._shards: dict[int, Any] = {}

    def delete(self, video_id: int) -> bool:
        """Delete one video; False where there is no such video. A shard that cannot take the
        delete raises: the video is gone from the catalog, and `vifusion check --repair`
        removes its vectors."""
        video = self.catalog.get_video(video_id)
        if video is None:
            return False
        shard = self._shard(
            shard_for(video_id, self.cfg.num_shards)
        )  # one that cannot open: nothing changed
        self.catalog.delete_video(video_id)
        if shard is not None:
            shard.delete_video(video_id)
        datadir.remove_stored_media(self.cfg.data_dir, video.media)
        shutil.rmtree(self.cfg.data_dir / datadir.THUMBS / str(video_id), ignore_errors=True)
        return True

    def _shard(self, n: int):
        from vifusion.index.shard import Shard

        directory = shard_dir(self.cfg.data_dir, n)
        if self._built is None or not directory.is_dir():
            return None  # nothing was ever indexed there
        if n not in self._shards:
            self._shards[n] = Shard(n, directory, self.cfg, writer=True)
        return self._shards[n]

    def close(self) -> None:
        self.catalog.close()
        self._shards.clear()


# -- status ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardState:
    shard: int
    rows: dict[str, int]  # per space
    videos: int
    log_bytes: int  # the write-ahead log not yet folded into a snapshot
    snapshot_at: float | None  # when the last snapshot was written (None: none yet)
    seq: int  # the last logged operation
    snapshot_seq: int  # the last one the snapshot holds

    def as_dict(self) -> dict[str, Any]:
        return {
            "shard": self.shard,
            "rows": self.rows,
            "videos": self.videos,
            "log_bytes": self.log_bytes,
            "snapshot_at": local_time(self.snapshot_at),
            "seq": self.seq,
            "snapshot_seq": self.snapshot_seq,
        }


def shard_states(cfg: Config) -> list[ShardState]:
    """Each shard's figures, read from its files (loaded as a reader: memory as its index)."""
    from vifusion.index.shard import SNAPSHOT, WAL_DIR, Shard

    built = built_shards(cfg.data_dir)
    if built is None:
        return []
    out = []
    for n in range(built):
        directory = shard_dir(cfg.data_dir, n)
        if not directory.is_dir():
            out.append(ShardState(n, {}, 0, 0, None, 0, 0))
            continue
        stats = Shard(n, directory, cfg, writer=False).stats()
        log_bytes = 0
        for f in (directory / WAL_DIR).glob("*.log"):
            with contextlib.suppress(OSError):  # dropped by a snapshot meanwhile
                log_bytes += f.stat().st_size
        try:
            snapshot_at = (directory / SNAPSHOT).stat().st_mtime
        except OSError:
            snapshot_at = None
        out.append(
            ShardState(
                n,
                stats["vectors"],
                stats["videos"],
                log_bytes,
                snapshot_at,
                stats["seq"],
                stats["snapshot_seq"],
            )
        )
    return out


def job_summary(catalog: Catalog) -> dict[str, Any]:
    """Jobs: counts per state, the running ones (stage, progress), the latest failures."""
    from vifusion.catalog import JOB_STATES

    jobs = catalog.jobs_in(JOB_STATES)
    counts = {s: sum(j.status == s for j in jobs) for s in JOB_STATES}
    failed = sorted((j for j in jobs if j.status == "failed"), key=lambda j: -j.updated_at)[
        :RECENT_FAILURES
    ]
    return {
        "counts": counts,
        "running": [_job(j) for j in jobs if j.status in RUNNING],
        "recent_failures": [_job(j) for j in failed],
    }


def _job(j: Job) -> dict[str, Any]:
    return {
        "job_id": j.id,
        "video_id": j.video_id,
        "status": j.status,
        "stage": j.stage,
        "progress": round(j.progress, 3),
        "error": j.error,
        "updated": local_time(j.updated_at),
    }
