"""The catalog: what videos exist and where each job stands, in SQLite under the data dir.

WAL mode with ``synchronous=FULL``: a write that returned is on disk. One connection per
thread (sqlite3 connections must not cross threads).
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JOB_STATES = ("queued", "decoding", "indexing", "ready", "failed")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS videos (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    source TEXT NOT NULL,
    title TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    sha256 TEXT,
    size_bytes INTEGER,
    duration_s REAL,
    fps REAL,
    width INTEGER,
    height INTEGER,
    status TEXT NOT NULL,
    frames_indexed INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    created_at REAL NOT NULL,
    media TEXT
);
CREATE INDEX IF NOT EXISTS videos_sha ON videos(sha256);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    video_id INTEGER NOT NULL REFERENCES videos(id),
    status TEXT NOT NULL,
    progress REAL NOT NULL DEFAULT 0,
    frames_indexed INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_video ON jobs(video_id);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status, created_at);
"""
# Metadata keys usable in filters: plain names only, so they can go into a JSON path safely.
METADATA_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class Video:
    id: int
    source: str
    title: str
    metadata: dict[str, Any]
    sha256: str | None
    size_bytes: int | None
    duration_s: float | None
    fps: float | None
    width: int | None
    height: int | None
    status: str
    frames_indexed: int
    error: str | None
    created_at: float
    media: str | None  # the local file to decode and serve; None: ``source`` is that file

    @property
    def media_path(self) -> Path | None:
        """The video file on this machine, if there is one yet (a URL is fetched by its job)."""
        if self.media:
            return Path(self.media)
        return None if "://" in self.source else Path(self.source)


@dataclass(frozen=True)
class Job:
    id: str
    video_id: int
    status: str
    progress: float
    frames_indexed: int
    error: str | None
    created_at: float
    updated_at: float


class Catalog:
    """Videos and jobs. Safe to share between threads of one process."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []  # every thread's connection, for close()
        self._all_lock = threading.Lock()
        with self._conn() as c:
            c.executescript(_SCHEMA)
            columns = {r["name"] for r in c.execute("PRAGMA table_info(videos)")}
            if "media" not in columns:  # catalogs written before uploads existed
                c.execute("ALTER TABLE videos ADD COLUMN media TEXT")

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # check_same_thread off only so close() can close it; each thread uses its own.
            conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    def add_video(
        self,
        source: str,
        title: str,
        metadata: dict[str, Any] | None = None,
        sha256: str | None = None,
        size_bytes: int | None = None,
        media: Path | None = None,
    ) -> tuple[int, str]:
        """A new video with a queued job; returns (video_id, job_id)."""
        now = time.time()
        job_id = uuid.uuid4().hex
        with self._conn() as c:
            cur = c.execute(
                "INSERT INTO videos (source, title, metadata, sha256, size_bytes, status, created_at, media)"
                " VALUES (?, ?, ?, ?, ?, 'queued', ?, ?)",
                (source, title, json.dumps(metadata or {}), sha256, size_bytes, now,
                 None if media is None else str(media)),
            )
            video_id = int(cur.lastrowid)
            c.execute(
                "INSERT INTO jobs (id, video_id, status, created_at, updated_at) VALUES (?, ?, 'queued', ?, ?)",
                (job_id, video_id, now, now),
            )
        return video_id, job_id

    def set_video_info(self, video_id: int, duration_s: float, fps: float, width: int, height: int) -> None:
        with self._conn() as c:
            c.execute(
                "UPDATE videos SET duration_s=?, fps=?, width=?, height=? WHERE id=?",
                (duration_s, fps, width, height, video_id),
            )

    def set_media(self, video_id: int, media: Path, sha256: str, size_bytes: int) -> None:
        """Record the local file a video's job fetched."""
        with self._conn() as c:
            c.execute(
                "UPDATE videos SET media=?, sha256=?, size_bytes=? WHERE id=?",
                (str(media), sha256, size_bytes, video_id),
            )

    def update_job(
        self,
        job_id: str,
        status: str,
        progress: float | None = None,
        frames_indexed: int | None = None,
        error: str | None = None,
    ) -> bool:
        """Move a job (and its video) to ``status``; ready and failed are final.

        Returns False, changing nothing, when the job is gone (its video was deleted)."""
        if status not in JOB_STATES:
            raise ValueError(f"unknown job status {status!r}")
        now = time.time()
        with self._conn() as c:
            row = c.execute("SELECT video_id, progress, frames_indexed FROM jobs WHERE id=?", (job_id,)).fetchone()
            if row is None:
                return False
            progress = 1.0 if status == "ready" else (row["progress"] if progress is None else progress)
            frames = row["frames_indexed"] if frames_indexed is None else frames_indexed
            c.execute(
                "UPDATE jobs SET status=?, progress=?, frames_indexed=?, error=?, updated_at=? WHERE id=?",
                (status, progress, frames, error, now, job_id),
            )
            c.execute(
                "UPDATE videos SET status=?, frames_indexed=?, error=? WHERE id=?",
                (status, frames, error, row["video_id"]),
            )
        return True

    def requeue(self, video_id: int, reason: str) -> str | None:
        """Index a video again: a new queued job (the ingest queue runs it at the next start),
        the reason kept in the video's ``error`` until it is ready. None: no such video."""
        now = time.time()
        job_id = uuid.uuid4().hex
        with self._conn() as c:
            if c.execute("UPDATE videos SET status='queued', frames_indexed=0, error=? WHERE id=?",
                         (reason, video_id)).rowcount == 0:
                return None
            c.execute(
                "INSERT INTO jobs (id, video_id, status, created_at, updated_at) VALUES (?, ?, 'queued', ?, ?)",
                (job_id, video_id, now, now),
            )
        return job_id

    def get_video(self, video_id: int) -> Video | None:
        row = self._conn().execute("SELECT * FROM videos WHERE id=?", (video_id,)).fetchone()
        return _video(row) if row else None

    def get_videos(self, video_ids: list[int]) -> dict[int, Video]:
        if not video_ids:
            return {}
        marks = ",".join("?" * len(video_ids))
        rows = self._conn().execute(f"SELECT * FROM videos WHERE id IN ({marks})", video_ids).fetchall()
        return {r["id"]: _video(r) for r in rows}

    def find_ready(self, sha256: str) -> Video | None:
        """An indexed video with this content, if any (re-runs skip it)."""
        row = self._conn().execute(
            "SELECT * FROM videos WHERE sha256=? AND status='ready' ORDER BY id LIMIT 1", (sha256,)
        ).fetchone()
        return _video(row) if row else None

    def list_videos(self, limit: int = 100, after_id: int = 0) -> list[Video]:
        rows = self._conn().execute(
            "SELECT * FROM videos WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit)
        ).fetchall()
        return [_video(r) for r in rows]

    def ready_ids(self, video_ids: list[int] | None = None, metadata: dict[str, Any] | None = None) -> set[int]:
        """The ready videos among ``video_ids`` (all when None) whose metadata has every
        key -> value of ``metadata`` (equality; keys must match ``METADATA_KEY``)."""
        sql, args = "SELECT id FROM videos WHERE status='ready'", []
        for key, value in (metadata or {}).items():
            if not METADATA_KEY.match(key):
                raise ValueError(f"metadata key {key!r}: use letters, digits, '_', '.', '-' (1-64)")
            if isinstance(value, (dict, list)):
                raise ValueError(f"metadata filter {key!r}: compare with a string, number or boolean")
            # json_type tells 1 from true; json_extract alone would not.
            if isinstance(value, bool):
                sql += " AND json_type(metadata, ?) = ?"
                args += [f'$."{key}"', "true" if value else "false"]
            else:
                sql += " AND json_extract(metadata, ?) IS ? AND json_type(metadata, ?) NOT IN ('true', 'false')"
                args += [f'$."{key}"', value, f'$."{key}"']
        if video_ids is not None:
            if not video_ids:
                return set()
            sql += f" AND id IN ({','.join('?' * len(video_ids))})"
            args += list(video_ids)
        return {r[0] for r in self._conn().execute(sql, args)}

    def jobs_in(self, states: tuple[str, ...]) -> list[Job]:
        """Jobs in any of ``states``, oldest first (the ingest queue)."""
        marks = ",".join("?" * len(states))
        rows = self._conn().execute(
            f"SELECT * FROM jobs WHERE status IN ({marks}) ORDER BY created_at, rowid", states
        ).fetchall()
        return [Job(**dict(r)) for r in rows]

    def counts(self) -> dict[str, int]:
        """Videos per status."""
        return {r[0]: r[1] for r in self._conn().execute("SELECT status, count(*) FROM videos GROUP BY status")}

    def get_job(self, job_id: str) -> Job | None:
        row = self._conn().execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        return Job(**dict(row)) if row else None

    def delete_video(self, video_id: int) -> bool:
        with self._conn() as c:
            c.execute("DELETE FROM jobs WHERE video_id=?", (video_id,))
            return c.execute("DELETE FROM videos WHERE id=?", (video_id,)).rowcount > 0

    def close(self) -> None:
        """Close every thread's connection (threads that use the catalog later reopen)."""
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()


def _video(row: sqlite3.Row) -> Video:
    d = dict(row)
    d["metadata"] = json.loads(d["metadata"])
    return Video(**d)
