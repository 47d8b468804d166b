"""The catalog: what videos exist and where each job stands, in SQLite under the data dir;
and what is said and written in them (speech segments, on-screen text spans), with a
keyword index (FTS5, BM25) for the exact words, names and numbers an embedding blurs
(``_catalog_texts.py``). The records it answers with are in ``_catalog_records.py``.

WAL mode with ``synchronous=FULL``: a write that returned is on disk. One connection per
thread (sqlite3 connections must not cross threads).

Jobs are leased (``lease_job``): a worker holds a job until ``lease_until`` and renews the
lease while it runs it (``renew_leases``); a job whose lease ran out is taken over by the next
taker. A catalog whose ``holder`` is set writes only the jobs that holder still holds
(``update_job`` raises LeaseLost otherwise), so a worker that lost its job to another can
never overwrite the new holder's progress nor end the job (``holding``: a thread writes as
its own holder, so the worker threads of one process fence each other too). The video rows a
job fills in (``set_video_info``, ``set_media``, its texts) are not fenced: both holders write
the same video's same values. A job counts the times it was taken (``attempts``): one taken
``max_attempts`` times without ending, its workers dying or stalling each time, is failed
instead of taken again.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vifusion.catalog._records import (
    JOB_STAGES,
    JOB_STATES,
    CatalogUnreachable,
    Job,
    LeaseLost,
    TextRow,
    Video,
    job_update,
)
from vifusion.catalog._schema import CatalogTooNew, migrate_sqlite
from vifusion.catalog._texts import SqliteTexts
from vifusion.catalog._words import (
    FUZZY_WEIGHT,
    METADATA_KEY,
    TEXT_KINDS,
    check_metadata_filter,
    max_edits,
)

if TYPE_CHECKING:
    from vifusion.config import Config

__all__ = [
    "FUZZY_WEIGHT",
    "JOB_STAGES",
    "JOB_STATES",
    "METADATA_KEY",
    "TEXT_KINDS",
    "Catalog",
    "CatalogTooNew",
    "CatalogUnreachable",
    "Job",
    "LeaseLost",
    "TextRow",
    "Video",
    "max_edits",
]

# Taking a job (``lease_job``): what a taken job is set to (now, owner, until), what one taken
# too often is set to instead (error, now, owner), and which jobs can be taken (now). A job
# taken over starts again from nothing: its progress is the new run's.
_LEASED = (
    "status='decoding', error=NULL, progress=0, frames_indexed=0, stage=NULL, updated_at=?,"
    " lease_owner=?, lease_until=?, attempts=attempts+1"
)
_GIVEN_UP = (
    "status='failed', error=?, progress=0, frames_indexed=0, updated_at=?, lease_owner=?,"
    " lease_until=NULL"
)
_TAKEABLE = (
    "(status='queued' OR (status IN ('decoding', 'indexing')"
    " AND (lease_until IS NULL OR lease_until < ?)))"
)


def given_up(attempts: int, stage: str | None, owner: str | None) -> str:
    """Why a job taken ``attempts`` times without ending is failed: its last run's stage and
    worker, from the row as that run left it."""
    where = f"in stage {stage}" if stage else "before its first stage"
    return (
        f"the ingest worker died {attempts} times while running this job"
        f" (last: {where}, worker {owner or 'unknown'})"
    )


def check_holder(holder: str | None, job_id: str, owner: str | None) -> None:
    """LeaseLost where a catalog writing as ``holder`` would write a job ``owner`` holds."""
    if holder is not None and owner != holder:
        raise LeaseLost(
            f"job {job_id} is no longer held by {holder}"
            + (f": {owner} took it over" if owner else "")
        )


# A video's metadata as filters read it: NULL (matching no filter) where SQLite cannot read it
# (NaN, stored before ingest refused it), since one such row would fail every filtered query.
_FILTERABLE = "(CASE WHEN json_valid(metadata) THEN metadata END)"


class Catalog(SqliteTexts):
    """Videos and jobs. Safe to share between threads of one process."""

    def __init__(self, path: Path, read_only: bool = False) -> None:
        """``read_only``: a reader beside whatever writes the data dir (a search in the command
        line's process): nothing is created or migrated; call only the methods that read.
        sqlite3.OperationalError where there is no catalog at ``path``."""
        self.path = Path(path)
        self.read_only = read_only
        self._holders = threading.local()
        self.holder = None
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []  # every thread's connection, for close()
        self._all_lock = threading.Lock()
        if read_only:
            self._conn()
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        migrate_sqlite(self.path)

    @property
    def holder(self) -> str | None:
        """The lease owner whose jobs alone ``update_job`` writes (None: any job's): this
        thread's inside ``holding``, else the catalog's."""
        return getattr(self._holders, "owner", None) or self._holder

    @holder.setter
    def holder(self, owner: str | None) -> None:
        self._holder = owner

    @contextlib.contextmanager
    def holding(self, owner: str) -> Iterator[None]:
        """This thread writes as ``owner`` in the block: the worker threads of one runner
        share the catalog, each fenced to the jobs it holds itself."""
        self._holders.owner = owner
        try:
            yield
        finally:
            self._holders.owner = None

    @staticmethod
    def open(cfg: Config, read_only: bool = False) -> Catalog:
        """The catalog ``cfg`` names: PostgreSQL at ``cfg.catalog_url``, else the SQLite file
        DATA_DIR/catalog.db. Opened for writing, it is migrated to this release's schema."""
        if cfg.catalog_url is None:
            return Catalog(cfg.data_dir / "catalog.db", read_only=read_only)
        from vifusion.catalog._postgres import PostgresCatalog

        return PostgresCatalog(
            cfg.catalog_url, pool_size=cfg.catalog_pool_size, read_only=read_only
        )

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # check_same_thread off only so close() can close it; each thread uses its own.
            if self.read_only:
                conn = _connect_read_only(self.path)
            else:
                conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
            conn.row_factory = sqlite3.Row
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
                (
                    source,
                    title,
                    json.dumps(metadata or {}),
                    sha256,
                    size_bytes,
                    now,
                    None if media is None else str(media),
                ),
            )
            video_id = int(cur.lastrowid)
            c.execute(
                "INSERT INTO jobs (id, video_id, status, created_at, updated_at) VALUES (?, ?, 'queued', ?, ?)",
                (job_id, video_id, now, now),
            )
        return video_id, job_id

    def set_video_info(
        self, video_id: int, duration_s: float, fps: float, width: int, height: int
    ) -> None:
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
        with self._conn() as c:
            c.execute("BEGIN IMMEDIATE")  # the write lock before the read: no other write between
            row = c.execute(
                "SELECT video_id, progress, frames_indexed, stage, warnings, lease_owner"
                " FROM jobs WHERE id=?",
                (job_id,),
            ).fetchone()
            if row is None:
                return False
            check_holder(self.holder, job_id, row["lease_owner"])
            progress, frames, stage, noted = job_update(
                row, status, progress, frames_indexed, stage, warnings
            )
            c.execute(
                "UPDATE jobs SET status=?, progress=?, frames_indexed=?, error=?, updated_at=?, stage=?, warnings=?,"
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
        return True

    def requeue(self, video_id: int, reason: str, if_status: str | None = None) -> str | None:
        """Index a video again: a new queued job (the ingest queue runs it at the next start),
        the reason kept in the video's ``error`` until it is ready. ``if_status``: only a video
        in that status now (checked in the same write). None: no such video (in that status)."""
        now = time.time()
        job_id = uuid.uuid4().hex
        with self._conn() as c:
            if (
                c.execute(
                    "UPDATE videos SET status='queued', frames_indexed=0, error=? WHERE id=?"
                    " AND (? IS NULL OR status=?)",
                    (reason, video_id, if_status, if_status),
                ).rowcount
                == 0
            ):
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
        rows = (
            self._conn()
            .execute(f"SELECT * FROM videos WHERE id IN ({marks})", video_ids)
            .fetchall()
        )
        return {r["id"]: _video(r) for r in rows}

    def find_ready(self, sha256: str) -> Video | None:
        """An indexed video with this content, if any (re-runs skip it)."""
        row = (
            self._conn()
            .execute(
                "SELECT * FROM videos WHERE sha256=? AND status='ready' ORDER BY id LIMIT 1",
                (sha256,),
            )
            .fetchone()
        )
        return _video(row) if row else None

    def list_videos(self, limit: int = 100, after_id: int = 0) -> list[Video]:
        rows = (
            self._conn()
            .execute("SELECT * FROM videos WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit))
            .fetchall()
        )
        return [_video(r) for r in rows]

    def ready_ids(
        self, video_ids: list[int] | None = None, metadata: dict[str, Any] | None = None
    ) -> set[int]:
        """The ready videos among ``video_ids`` (all when None) whose metadata has every
        key -> value of ``metadata`` (equality; keys must match ``METADATA_KEY``)."""
        sql, args = "SELECT id FROM videos WHERE status='ready'", []
        for key, value in (metadata or {}).items():
            check_metadata_filter(key, value)
            # json_type tells 1 from true; json_extract alone would not.
            if isinstance(value, bool):
                sql += f" AND json_type({_FILTERABLE}, ?) = ?"
                args += [f'$."{key}"', "true" if value else "false"]
            else:
                sql += (
                    f" AND json_extract({_FILTERABLE}, ?) IS ?"
                    f" AND json_type({_FILTERABLE}, ?) NOT IN ('true', 'false')"
                )
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
        rows = (
            self._conn()
            .execute(
                f"SELECT * FROM jobs WHERE status IN ({marks}) ORDER BY created_at, rowid", states
            )
            .fetchall()
        )
        return [_job(r) for r in rows]

    def lease_job(
        self,
        owner: str,
        lease_s: float,
        exclude: Collection[str] = (),
        max_attempts: int | None = None,
    ) -> Job | None:
        """Take the oldest job that is queued, or running under a lease that ran out (its
        holder died or stalled; never leased counts as run out: a crash before leases),
        passing over the ids in ``exclude`` (the jobs the caller's process runs itself): it
        moves to ``decoding`` from its start, held by ``owner`` for ``lease_s``, its
        ``attempts`` one more, in one write transaction (SQLite's single writer), so two
        takers never get the same job. None: no such job.

        A job taken ``max_attempts`` times already is not run again: it is returned failed
        (``given_up``; the caller clears what its runs left in the shards)."""
        now = time.time()
        skip = list(exclude)
        with self._conn() as c:
            c.execute("BEGIN IMMEDIATE")  # the write lock before the read: no other taker between
            row = c.execute(
                f"SELECT id, video_id, attempts, stage, lease_owner FROM jobs WHERE {_TAKEABLE}"
                f" AND id NOT IN ({','.join('?' * len(skip))}) ORDER BY created_at, rowid LIMIT 1",
                (now, *skip),
            ).fetchone()
            if row is None:
                return None
            if max_attempts is not None and row["attempts"] >= max_attempts:
                error = given_up(row["attempts"], row["stage"], row["lease_owner"])
                job = c.execute(
                    f"UPDATE jobs SET {_GIVEN_UP} WHERE id=? RETURNING *",
                    (error, now, owner, row["id"]),
                ).fetchone()
                c.execute(
                    "UPDATE videos SET status='failed', frames_indexed=0, error=? WHERE id=?",
                    (error, row["video_id"]),
                )
                return _job(job)
            job = c.execute(
                f"UPDATE jobs SET {_LEASED} WHERE id=? RETURNING *",
                (now, owner, now + lease_s, row["id"]),
            ).fetchone()
            c.execute(
                "UPDATE videos SET status='decoding', frames_indexed=0, error=NULL WHERE id=?",
                (row["video_id"],),
            )
        return _job(job)

    def renew_leases(self, owner: str, lease_s: float) -> list[str]:
        """The heartbeat: every running job ``owner`` still holds is held ``lease_s`` more.
        Returns their ids (a job missing from them was taken over, or has ended)."""
        with self._conn() as c:
            rows = c.execute(
                "UPDATE jobs SET lease_until=? WHERE lease_owner=?"
                " AND status IN ('decoding', 'indexing') RETURNING id",
                (time.time() + lease_s, owner),
            ).fetchall()
        return sorted(r[0] for r in rows)

    def expire_leases(self, name: str) -> int:
        """End at once the leases of every incarnation of the worker ``name`` (owners
        ``name/...``): a restarted worker's first act, so that it (or any taker) retakes the
        jobs its last incarnation was running without waiting out their leases. Returns
        how many."""
        with self._conn() as c:
            return c.execute(
                "UPDATE jobs SET lease_until=NULL WHERE substr(lease_owner, 1, ?)=?"
                " AND status IN ('decoding', 'indexing')",
                (len(name) + 1, name + "/"),
            ).rowcount

    def check_lease(self, job_id: str) -> None:
        """LeaseLost unless ``holder`` is unset or holds the job (before a step that undoes
        what the job sent, such as deleting its video's vectors for a fresh try)."""
        row = self._conn().execute("SELECT lease_owner FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is not None:
            check_holder(self.holder, job_id, row[0])

    def counts(self) -> dict[str, int]:
        """Videos per status."""
        return {
            r[0]: r[1]
            for r in self._conn().execute("SELECT status, count(*) FROM videos GROUP BY status")
        }

    def get_job(self, job_id: str) -> Job | None:
        row = self._conn().execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        return _job(row) if row else None

    def latest_jobs(self, video_ids: list[int]) -> dict[int, Job]:
        """Each video's newest job (a retry's, say), by video id; videos without one are left out."""
        if not video_ids:
            return {}
        marks = ",".join("?" * len(video_ids))
        rows = (
            self._conn()
            .execute(
                f"SELECT * FROM jobs WHERE video_id IN ({marks}) ORDER BY created_at, rowid",
                video_ids,
            )
            .fetchall()
        )
        return {r["video_id"]: _job(r) for r in rows}  # the newest last, so it wins

    def delete_video(self, video_id: int) -> bool:
        with self._conn() as c:
            c.execute("DELETE FROM texts WHERE video_id=?", (video_id,))
            c.execute("DELETE FROM jobs WHERE video_id=?", (video_id,))
            return c.execute("DELETE FROM videos WHERE id=?", (video_id,)).rowcount > 0

    def close(self) -> None:
        """Close every thread's connection (threads that use the catalog later reopen)."""
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that reads ``path`` and leaves the data dir as it found it.

    Opened read-write (never created), not ``mode=ro``: a read-only connection to a WAL
    database cannot remove the -wal and -shm files it creates, while the last read-write
    connection to close removes them. (Not ``query_only`` either: keyword search makes a
    temp table.) Where the file or its folder cannot be
    written, ``mode=ro``; where even that cannot open it (no -shm there and none can be
    made), ``immutable``, which is safe then: no writer can be at work in that folder."""
    where = path.resolve().as_uri()
    for mode in ("mode=rw", "mode=ro", "immutable=1"):
        try:
            conn = sqlite3.connect(f"{where}?{mode}", uri=True, timeout=30, check_same_thread=False)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the file
            return conn
        except sqlite3.OperationalError as e:
            if "no such" in str(e) or not path.is_file():
                raise sqlite3.OperationalError(f"no catalog at {path}") from None
            last = e
    raise last


def _job(row: sqlite3.Row) -> Job:
    d = dict(row)
    d["warnings"] = tuple(json.loads(d["warnings"]))
    return Job(**d)


def _video(row: sqlite3.Row) -> Video:
    d = dict(row)
    d["metadata"] = json.loads(d["metadata"])
    return Video(**d)
