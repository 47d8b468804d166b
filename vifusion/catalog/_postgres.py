"""The catalog in PostgreSQL (``catalog_url``): the SQLite catalog's methods and answers, for
a cluster whose nodes share no disk.

Connections come from a pool (psycopg 3), each in autocommit: a write that returns has been
committed (PostgreSQL's ``synchronous_commit`` makes that durable); writes of several
statements run in one transaction. Jobs are leased with ``FOR UPDATE SKIP LOCKED``, so any
number of processes can take jobs without taking one twice.

Keyword search gives SQLite's answers without FTS5: the text is cut into tokens here as FTS5's
unicode61 cuts it (``_catalog_words.tokens``), each token stemmed by PostgreSQL's English
Snowball stemmer (stop words kept, as FTS5 keeps them), and stored as a ``tsvector`` of
stems at their positions with a GIN index that finds the rows holding a query's phrases.
BM25, snippets and coverage are computed from those positions, as FTS5 computes them
(``_catalog_pg_words.py``; the text methods are in ``_catalog_pg_texts.py``).
Stems can differ from FTS5's Porter stemmer on a few words (Snowball is Porter's successor).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Collection, Sequence
from typing import Any

from vifusion.catalog import (
    _GIVEN_UP,
    _LEASED,
    _TAKEABLE,
    JOB_STAGES,
    JOB_STATES,
    Catalog,
    CatalogUnreachable,
    Job,
    Video,
    check_holder,
    given_up,
)
from vifusion.catalog._pg_texts import PostgresTexts
from vifusion.catalog._records import job_update
from vifusion.catalog._schema import migrate_postgres
from vifusion.catalog._words import check_metadata_filter

_JOB = (
    "id, video_id, status, progress, frames_indexed, error, created_at, updated_at, stage, warnings,"
    " lease_owner, lease_until, attempts"
)


class PostgresCatalog(PostgresTexts, Catalog):
    """Videos, jobs and texts in PostgreSQL. Safe to share between threads and processes."""

    def __init__(self, url: str, pool_size: int = 8, read_only: bool = False) -> None:
        """``read_only``: nothing is created or migrated, and the connections refuse writes.
        Fails at once (CatalogUnreachable) where the server cannot be reached."""
        import psycopg
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        info = psycopg.conninfo.conninfo_to_dict(url)
        self.url = url
        self.where = (
            f"postgresql://{info.get('user', '')}@{info.get('host', '')}:{info.get('port', 5432)}"
            f"/{info.get('dbname', '')}"
        )  # the URL without its password, for messages
        self.path = None
        self.read_only = read_only
        self._holders = threading.local()
        self.holder = None
        kwargs: dict[str, Any] = {"autocommit": True, "row_factory": dict_row}
        if read_only:
            kwargs["options"] = "-c default_transaction_read_only=on"
        try:  # a clear error now, not a pool timeout
            conn = psycopg.connect(url, connect_timeout=10, **kwargs)
        except psycopg.OperationalError as e:
            raise CatalogUnreachable(
                f"cannot reach the catalog at {self.where}: {str(e).strip()}"
            ) from None
        with conn:
            if not read_only:
                migrate_postgres(conn, self.where)
            elif conn.execute("SELECT to_regclass('schema_version') AS t").fetchone()["t"] is None:
                raise sqlite3.OperationalError(f"no catalog at {self.where}")
        # Each connection is checked as it is handed out: one the server dropped (a restart,
        # a failover) is replaced, not returned to fail the caller's statement.
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs=kwargs,
            open=True,
            check=ConnectionPool.check_connection,
            name="vifusion-catalog",
        )

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._pool.connection() as c:
            return c.execute(sql, args).fetchall()

    def _row(self, sql: str, args: Sequence[Any] = ()) -> dict[str, Any] | None:
        rows = self._rows(sql, args)
        return rows[0] if rows else None

    def _write(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one write; the rows it touched."""
        with self._pool.connection() as c:
            return c.execute(sql, args).rowcount

    # -- videos and jobs -------------------------------------------------------------

    def add_video(
        self,
        source: str,
        title: str,
        metadata: dict[str, Any] | None = None,
        sha256: str | None = None,
        size_bytes: int | None = None,
        media: Any = None,
    ) -> tuple[int, str]:
        now = time.time()
        job_id = uuid.uuid4().hex
        meta = json.dumps(
            metadata or {}, allow_nan=False
        )  # filters read it as jsonb, which has no NaN
        with self._pool.connection() as c, c.transaction():
            video_id = c.execute(
                "INSERT INTO videos (source, title, metadata, sha256, size_bytes, status, created_at, media)"
                " VALUES (%s, %s, %s, %s, %s, 'queued', %s, %s) RETURNING id",
                (
                    source,
                    title,
                    meta,
                    sha256,
                    size_bytes,
                    now,
                    None if media is None else str(media),
                ),
            ).fetchone()["id"]
            c.execute(
                "INSERT INTO jobs (id, video_id, status, created_at, updated_at) VALUES (%s, %s, 'queued', %s, %s)",
                (job_id, video_id, now, now),
            )
        return video_id, job_id

    def set_video_info(
        self, video_id: int, duration_s: float, fps: float, width: int, height: int
    ) -> None:
        self._write(
            "UPDATE videos SET duration_s=%s, fps=%s, width=%s, height=%s WHERE id=%s",
            (duration_s, fps, width, height, video_id),
        )

    def set_media(self, video_id: int, media: Any, sha256: str, size_bytes: int) -> None:
        self._write(
            "UPDATE videos SET media=%s, sha256=%s, size_bytes=%s WHERE id=%s",
            (str(media), sha256, size_bytes, video_id),
        )

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
        if status not in JOB_STATES:
            raise ValueError(f"unknown job status {status!r}")
        if stage is not None and stage not in JOB_STAGES:
            raise ValueError(f"unknown job stage {stage!r}")
        now = time.time()
        with self._pool.connection() as c, c.transaction():
            row = c.execute(
                "SELECT video_id, progress, frames_indexed, stage, warnings, lease_owner FROM jobs"
                " WHERE id=%s FOR UPDATE",
                (job_id,),
            ).fetchone()
            if row is None:
                return False
            check_holder(self.holder, job_id, row["lease_owner"])
            progress, frames, stage, noted = job_update(
                row, status, progress, frames_indexed, stage, warnings
            )
            c.execute(
                "UPDATE jobs SET status=%s, progress=%s, frames_indexed=%s, error=%s, updated_at=%s, stage=%s,"
                " warnings=%s, lease_owner=CASE WHEN %s='queued' THEN NULL ELSE lease_owner END,"
                " lease_until=CASE WHEN %s='queued' THEN NULL ELSE lease_until END,"
                " attempts=CASE WHEN %s='queued' THEN 0 ELSE attempts END WHERE id=%s",
                (status, progress, frames, error, now, stage, noted, *[status] * 3, job_id),
            )
            c.execute(
                "UPDATE videos SET status=%s, frames_indexed=%s, error=%s WHERE id=%s",
                (status, frames, error, row["video_id"]),
            )
        return True

    def requeue(self, video_id: int, reason: str, if_status: str | None = None) -> str | None:
        now = time.time()
        job_id = uuid.uuid4().hex
        with self._pool.connection() as c, c.transaction():
            if (
                c.execute(
                    "UPDATE videos SET status='queued', frames_indexed=0, error=%s WHERE id=%s"
                    " AND (%s::text IS NULL OR status=%s)",
                    (reason, video_id, if_status, if_status),
                ).rowcount
                == 0
            ):
                return None
            c.execute(
                "INSERT INTO jobs (id, video_id, status, created_at, updated_at) VALUES (%s, %s, 'queued', %s, %s)",
                (job_id, video_id, now, now),
            )
        return job_id

    def lease_job(
        self,
        owner: str,
        lease_s: float,
        exclude: Collection[str] = (),
        max_attempts: int | None = None,
    ) -> Job | None:
        """As SQLite's, the row locked (SKIP LOCKED: a second taker passes over the row the
        first has locked, and gets the next one)."""
        now = time.time()
        with self._pool.connection() as c, c.transaction():
            row = c.execute(
                "SELECT id, video_id, attempts, stage, lease_owner FROM jobs"
                f" WHERE {_TAKEABLE.replace('?', '%s')} AND NOT (id = ANY(%s))"
                " ORDER BY created_at, seq LIMIT 1 FOR UPDATE SKIP LOCKED",
                (now, list(exclude)),
            ).fetchone()
            if row is None:
                return None
            if max_attempts is not None and row["attempts"] >= max_attempts:
                error = given_up(row["attempts"], row["stage"], row["lease_owner"])
                job = c.execute(
                    f"UPDATE jobs SET {_GIVEN_UP.replace('?', '%s')} WHERE id=%s RETURNING {_JOB}",
                    (error, now, owner, row["id"]),
                ).fetchone()
                c.execute(
                    "UPDATE videos SET status='failed', frames_indexed=0, error=%s WHERE id=%s",
                    (error, row["video_id"]),
                )
                return _job(job)
            job = c.execute(
                f"UPDATE jobs SET {_LEASED.replace('?', '%s')} WHERE id=%s RETURNING {_JOB}",
                (now, owner, now + lease_s, row["id"]),
            ).fetchone()
            c.execute(
                "UPDATE videos SET status='decoding', frames_indexed=0, error=NULL WHERE id=%s",
                (row["video_id"],),
            )
        return _job(job)

    def renew_leases(self, owner: str, lease_s: float) -> list[str]:
        rows = self._rows(
            "UPDATE jobs SET lease_until=%s WHERE lease_owner=%s"
            " AND status IN ('decoding', 'indexing') RETURNING id",
            (time.time() + lease_s, owner),
        )
        return sorted(r["id"] for r in rows)

    def expire_leases(self, name: str) -> int:
        return self._write(
            "UPDATE jobs SET lease_until=NULL WHERE substr(lease_owner, 1, %s)=%s"
            " AND status IN ('decoding', 'indexing')",
            (len(name) + 1, name + "/"),
        )

    def check_lease(self, job_id: str) -> None:
        row = self._row("SELECT lease_owner FROM jobs WHERE id=%s", (job_id,))
        if row is not None:
            check_holder(self.holder, job_id, row["lease_owner"])

    def get_video(self, video_id: int) -> Video | None:
        row = self._row("SELECT * FROM videos WHERE id=%s", (video_id,))
        return _video(row) if row else None

    def get_videos(self, video_ids: list[int]) -> dict[int, Video]:
        if not video_ids:
            return {}
        return {
            r["id"]: _video(r)
            for r in self._rows("SELECT * FROM videos WHERE id = ANY(%s)", (list(video_ids),))
        }

    def find_ready(self, sha256: str) -> Video | None:
        row = self._row(
            "SELECT * FROM videos WHERE sha256=%s AND status='ready' ORDER BY id LIMIT 1", (sha256,)
        )
        return _video(row) if row else None

    def list_videos(self, limit: int = 100, after_id: int = 0) -> list[Video]:
        return [
            _video(r)
            for r in self._rows(
                "SELECT * FROM videos WHERE id > %s ORDER BY id LIMIT %s", (after_id, limit)
            )
        ]

    def ready_ids(
        self, video_ids: list[int] | None = None, metadata: dict[str, Any] | None = None
    ) -> set[int]:
        """As SQLite's: jsonb equality tells 1 from "1" and from true, and a missing key
        from a null."""
        sql, args = "SELECT id FROM videos WHERE status='ready'", []
        for key, value in (metadata or {}).items():
            check_metadata_filter(key, value)
            sql += " AND (metadata::jsonb -> %s) = %s::jsonb"
            args += [key, json.dumps(value)]
        if video_ids is not None:
            if not video_ids:
                return set()
            sql += " AND id = ANY(%s)"
            args.append(list(video_ids))
        return {r["id"] for r in self._rows(sql, args)}

    def jobs_in(self, states: tuple[str, ...]) -> list[Job]:
        return [
            _job(r)
            for r in self._rows(
                f"SELECT {_JOB} FROM jobs WHERE status = ANY(%s) ORDER BY created_at, seq",
                (list(states),),
            )
        ]

    def counts(self) -> dict[str, int]:
        return {
            r["status"]: r["n"]
            for r in self._rows("SELECT status, count(*) AS n FROM videos GROUP BY status")
        }

    def get_job(self, job_id: str) -> Job | None:
        if "\x00" in job_id:  # no job has one (PostgreSQL's text cannot hold it): as SQLite's
            return None
        row = self._row(f"SELECT {_JOB} FROM jobs WHERE id=%s", (job_id,))
        return _job(row) if row else None

    def latest_jobs(self, video_ids: list[int]) -> dict[int, Job]:
        if not video_ids:
            return {}
        rows = self._rows(
            f"SELECT {_JOB} FROM jobs WHERE video_id = ANY(%s) ORDER BY created_at, seq",
            (list(video_ids),),
        )
        return {r["video_id"]: _job(r) for r in rows}  # the newest last, so it wins

    def delete_video(self, video_id: int) -> bool:
        with self._pool.connection() as c, c.transaction():
            c.execute("DELETE FROM texts WHERE video_id=%s", (video_id,))
            c.execute("DELETE FROM jobs WHERE video_id=%s", (video_id,))
            return c.execute("DELETE FROM videos WHERE id=%s", (video_id,)).rowcount > 0

    def close(self) -> None:
        self._pool.close()


def _job(row: dict[str, Any]) -> Job:
    return Job(**{**row, "warnings": tuple(json.loads(row["warnings"]))})


def _video(row: dict[str, Any]) -> Video:
    return Video(**{**row, "metadata": json.loads(row["metadata"])})
