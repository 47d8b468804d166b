"""The catalog's one interface, ``Catalog``: what videos exist and where each job stands,
whichever database holds them (``_sqlite.py``, ``_postgres.py``), each statement written
once (``_database.py``). Its job leases are in ``_leases.py``, its texts and keyword search
in ``_texts.py``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vifusion.catalog._collections import DEFAULT, Collections, check_collection
from vifusion.catalog._keys import Keys
from vifusion.catalog._leases import Leases, check_holder
from vifusion.catalog._outbox import Outbox, emit_job_end, emit_video_deleted
from vifusion.catalog._records import (
    JOB_COLUMNS,
    JOB_STAGES,
    JOB_STATES,
    Job,
    Video,
    job_from_row,
    job_update,
    video_from_row,
)
from vifusion.catalog._texts import Texts
from vifusion.catalog._words import check_metadata_filter

_NEW_JOB = (
    "INSERT INTO jobs (id, video_id, status, created_at, updated_at) VALUES (?, ?, 'queued', ?, ?)"
)


class Catalog(Leases, Texts, Keys, Collections, Outbox):
    """Videos, jobs, their texts, API keys (``_keys.py``) and collections
    (``_collections.py``). Safe to share between
    threads (and, on PostgreSQL, processes). Open one with ``open_catalog``."""

    path: Path | None  # the SQLite file; None on a server

    def __init__(self, read_only: bool) -> None:
        """``read_only``: a reader beside whatever writes: nothing is created or migrated;
        call only the methods that read."""
        super().__init__()
        self.read_only = read_only

    # -- videos --------------------------------------------------------------------

    def add_video(
        self,
        source: str,
        title: str,
        metadata: dict[str, Any] | None = None,
        sha256: str | None = None,
        size_bytes: int | None = None,
        media: Path | None = None,
        collection: str = DEFAULT,
    ) -> tuple[int, str]:
        """A new video in ``collection`` with a queued job; returns (video_id, job_id).
        ValueError where ``metadata`` holds NaN or infinity (filters read it as JSON, which
        has neither) or ``collection`` is no collection's name."""
        check_collection(collection)
        now = time.time()
        job_id = uuid.uuid4().hex
        meta = json.dumps(metadata or {}, allow_nan=False)
        with self._transaction() as c:
            video_id = c.execute(
                "INSERT INTO videos (source, title, metadata, sha256, size_bytes, status,"
                " created_at, media, collection) VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?)"
                " RETURNING id",
                (
                    source,
                    title,
                    meta,
                    sha256,
                    size_bytes,
                    now,
                    None if media is None else str(media),
                    collection,
                ),
            ).fetchone()["id"]
            c.execute(_NEW_JOB, (job_id, video_id, now, now))
        return video_id, job_id

    def set_video_info(
        self, video_id: int, duration_s: float, fps: float, width: int, height: int
    ) -> None:
        self._write(
            "UPDATE videos SET duration_s=?, fps=?, width=?, height=? WHERE id=?",
            (duration_s, fps, width, height, video_id),
        )

    def set_media(self, video_id: int, media: Path, sha256: str, size_bytes: int) -> None:
        """Record the local file a video's job fetched."""
        self._write(
            "UPDATE videos SET media=?, sha256=?, size_bytes=? WHERE id=?",
            (str(media), sha256, size_bytes, video_id),
        )

    def set_video_language(self, video_id: int, language: str | None) -> None:
        """Record the language a video's speech is in (ISO 639-1; None: nothing was said)."""
        self._write("UPDATE videos SET language=? WHERE id=?", (language, video_id))

    def spoken_languages(
        self, video_ids: Sequence[int] | None = None, collections: Sequence[str] | None = None
    ) -> dict[str, int]:
        """Ready videos per language spoken (ISO 639-1, each video's first), among
        ``video_ids`` and in ``collections`` where given."""
        sql, args = "SELECT language, count(*) AS n FROM videos WHERE status='ready'", []
        sql += " AND language IS NOT NULL"
        for column, values in (("id", video_ids), ("collection", collections)):
            if values is None:
                continue
            if not values:
                return {}
            clause, more = self._any_of(column, list(values))
            sql, args = f"{sql} AND {clause}", args + more
        return {r["language"]: r["n"] for r in self._rows(f"{sql} GROUP BY language", args)}

    def get_video(self, video_id: int) -> Video | None:
        row = self._row("SELECT * FROM videos WHERE id=?", (video_id,))
        return video_from_row(row) if row else None

    def get_videos(self, video_ids: list[int]) -> dict[int, Video]:
        if not video_ids:
            return {}
        where, args = self._any_of("id", video_ids)
        return {
            r["id"]: video_from_row(r)
            for r in self._rows(f"SELECT * FROM videos WHERE {where}", args)
        }

    def find_ready(self, sha256: str, collection: str | None = None) -> Video | None:
        """An indexed video with this content (in ``collection`` when given), if any (re-runs
        skip it)."""
        sql, args = "SELECT * FROM videos WHERE sha256=? AND status='ready'", [sha256]
        if collection is not None:
            sql, args = f"{sql} AND collection=?", [*args, collection]
        row = self._row(f"{sql} ORDER BY id LIMIT 1", args)
        return video_from_row(row) if row else None

    def list_videos(
        self, limit: int = 100, after_id: int = 0, collections: Sequence[str] | None = None
    ) -> list[Video]:
        """Videos after ``after_id`` in id order, only those in ``collections`` when given."""
        sql, args = "SELECT * FROM videos WHERE id > ?", [after_id]
        if collections is not None:
            if not collections:
                return []
            clause, more = self._any_of("collection", list(collections))
            sql, args = f"{sql} AND {clause}", args + more
        rows = self._rows(f"{sql} ORDER BY id LIMIT ?", [*args, limit])
        return [video_from_row(r) for r in rows]

    def ready_ids(
        self,
        video_ids: list[int] | None = None,
        metadata: dict[str, Any] | None = None,
        languages: list[str] | None = None,
        collections: Sequence[str] | None = None,
    ) -> set[int]:
        """The ready videos among ``video_ids`` (all when None) whose metadata has every
        key -> value of ``metadata`` (equality, telling 1 from "1" and from true; keys must
        match ``METADATA_KEY``), given ``languages``, in which one of them is spoken (the
        video's language, or any speech row's where it switches), and, given
        ``collections``, in one of them."""
        sql, args = "SELECT id FROM videos WHERE status='ready'", []
        if collections is not None:
            if not collections:
                return set()
            clause, args = self._any_of("collection", list(collections))
            sql = f"{sql} AND {clause}"
        if languages is not None:
            if not languages:
                return set()
            spoken, more = self._any_of("language", list(languages))
            said, more2 = self._any_of("t.language", list(languages))
            sql += (
                f" AND ({spoken} OR id IN (SELECT t.video_id FROM texts t"
                f" WHERE t.kind='speech' AND {said}))"
            )
            args += more + more2
        for key, value in (metadata or {}).items():
            check_metadata_filter(key, value)
            clause, more = self._metadata_is(key, value)
            sql, args = f"{sql} AND {clause}", args + more
        if video_ids is not None:
            if not video_ids:
                return set()
            clause, more = self._any_of("id", video_ids)
            sql, args = f"{sql} AND {clause}", args + more
        return {r["id"] for r in self._rows(sql, args)}

    def counts(self) -> dict[str, int]:
        """Videos per status."""
        rows = self._rows("SELECT status, count(*) AS n FROM videos GROUP BY status")
        return {r["status"]: r["n"] for r in rows}

    def delete_video(self, video_id: int) -> bool:
        """Forget a video, its jobs and texts; its ``video.deleted`` event is written in the
        same transaction (every delete comes here). False: no such video."""
        with self._transaction() as c:
            video = c.execute(
                f"SELECT * FROM videos WHERE id=?{self.dialect.lock}", (video_id,)
            ).fetchone()
            c.execute("DELETE FROM texts WHERE video_id=?", (video_id,))
            c.execute("DELETE FROM jobs WHERE video_id=?", (video_id,))
            if video is None:  # gone already (its texts, written since, are gone now)
                return False
            c.execute("DELETE FROM videos WHERE id=?", (video_id,))
            emit_video_deleted(c, video)
            return True

    def requeue(self, video_id: int, reason: str, if_status: str | None = None) -> str | None:
        """Index a video again: a new queued job (the ingest queue runs it at the next start),
        the reason kept in the video's ``error`` until it is ready. ``if_status``: only a video
        in that status now (checked in the same write). None: no such video (in that status)."""
        now = time.time()
        job_id = uuid.uuid4().hex
        with self._transaction() as c:
            if not c.execute(
                "UPDATE videos SET status='queued', frames_indexed=0, error=? WHERE id=?"
                " AND (CAST(? AS TEXT) IS NULL OR status=?)",
                (reason, video_id, if_status, if_status),
            ).rowcount:
                return None
            c.execute(_NEW_JOB, (job_id, video_id, now, now))
        return job_id

    # -- jobs ----------------------------------------------------------------------

    def get_job(self, job_id: str) -> Job | None:
        if "\x00" in job_id:  # no job has one (PostgreSQL's text cannot even hold it)
            return None
        row = self._row(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id=?", (job_id,))
        return job_from_row(row) if row else None

    def jobs_in(self, states: tuple[str, ...]) -> list[Job]:
        """Jobs in any of ``states``, oldest first (the ingest queue)."""
        where, args = self._any_of("status", states)
        order = f"created_at, {self.dialect.seq}"
        return [
            job_from_row(r)
            for r in self._rows(
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE {where} ORDER BY {order}", args
            )
        ]

    def latest_jobs(self, video_ids: list[int]) -> dict[int, Job]:
        """Each video's newest job (a retry's, say), by video id; videos without one are left out."""
        if not video_ids:
            return {}
        where, args = self._any_of("video_id", video_ids)
        order = f"created_at, {self.dialect.seq}"
        rows = self._rows(f"SELECT {JOB_COLUMNS} FROM jobs WHERE {where} ORDER BY {order}", args)
        return {r["video_id"]: job_from_row(r) for r in rows}  # the newest last, so it wins

    def update_job(
        self,
        job_id: str,
        status: str,
        progress: float | None = None,
        frames_indexed: int | None = None,
        error: str | None = None,
        stage: str | None = None,
        warnings: Sequence[str] | None = None,
    ) -> bool:
        """Move a job (and its video) to ``status``; ready and failed are final. ``stage``
        (one of JOB_STAGES) and ``warnings``: None keeps the job's; queued and ready clear
        the stage; queued lets go of its lease and sets ``attempts`` back to 0 (put back on
        purpose, by a worker alive: not a death).

        Returns False, changing nothing, when the job is gone (its video was deleted).
        LeaseLost, changing nothing, when ``holder`` is set and does not hold the job."""
        if status not in JOB_STATES:
            raise ValueError(f"unknown job status {status!r}")
        if stage is not None and stage not in JOB_STAGES:
            raise ValueError(f"unknown job stage {stage!r}")
        now = time.time()
        with self._transaction() as c:
            row = c.execute(
                "SELECT video_id, status, progress, frames_indexed, stage, warnings, lease_owner"
                f" FROM jobs WHERE id=?{self.dialect.lock}",
                (job_id,),
            ).fetchone()
            if row is None:
                return False
            check_holder(self.holder, job_id, row["lease_owner"])
            progress, frames, stage, noted = job_update(
                row, status, progress, frames_indexed, stage, warnings
            )
            c.execute(
                "UPDATE jobs SET status=?, progress=?, frames_indexed=?, error=?, updated_at=?,"
                " stage=?, warnings=?,"
                " lease_owner=CASE WHEN ?='queued' THEN NULL ELSE lease_owner END,"
                " lease_until=CASE WHEN ?='queued' THEN NULL ELSE lease_until END,"
                " attempts=CASE WHEN ?='queued' THEN 0 ELSE attempts END"
                " WHERE id=?",
                (status, progress, frames, error, now, stage, noted, *[status] * 3, job_id),
            )
            c.execute(
                "UPDATE videos SET status=?, frames_indexed=?, error=? WHERE id=?",
                (status, frames, error, row["video_id"]),
            )
            if status in ("ready", "failed") and row["status"] != status:  # its event, once
                emit_job_end(c, job_id, row["video_id"], status, error)
        return True
