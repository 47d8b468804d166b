"""The catalog: what videos exist and where each job stands, in SQLite under the data dir.

WAL mode with ``synchronous=FULL``: a write that returned is on disk. One connection per
thread (sqlite3 connections must not cross threads).
"""

from __future__ import annotations

import json
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
    created_at REAL NOT NULL
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
"""


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
        with self._conn() as c:
            c.executescript(_SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            self._local.conn = conn
        return conn

    def add_video(
        self,
        source: str,
        title: str,
        metadata: dict[str, Any] | None = None,
        sha256: str | None = None,
        size_bytes: int | None = None,
    ) -> tuple[int, str]:
        """A new video with a queued job; returns (video_id, job_id)."""
        now = time.time()
        job_id = uuid.uuid4().hex
        with self._conn() as c:
            cur = c.execute(
                "INSERT INTO videos (source, title, metadata, sha256, size_bytes, status, created_at)"
                " VALUES (?, ?, ?, ?, ?, 'queued', ?)",
                (source, title, json.dumps(metadata or {}), sha256, size_bytes, now),
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

    def update_job(
        self,
        job_id: str,
        status: str,
        progress: float | None = None,
        frames_indexed: int | None = None,
        error: str | None = None,
    ) -> None:
        """Move a job (and its video) to ``status``; ready and failed are final."""
        if status not in JOB_STATES:
            raise ValueError(f"unknown job status {status!r}")
        now = time.time()
        with self._conn() as c:
            row = c.execute("SELECT video_id, progress, frames_indexed FROM jobs WHERE id=?", (job_id,)).fetchone()
            if row is None:
                raise KeyError(job_id)
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

    def get_job(self, job_id: str) -> Job | None:
        row = self._conn().execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        return Job(**dict(row)) if row else None

    def delete_video(self, video_id: int) -> bool:
        with self._conn() as c:
            c.execute("DELETE FROM jobs WHERE video_id=?", (video_id,))
            return c.execute("DELETE FROM videos WHERE id=?", (video_id,)).rowcount > 0

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def _video(row: sqlite3.Row) -> Video:
    d = dict(row)
    d["metadata"] = json.loads(d["metadata"])
    return Video(**d)
