"""Job leases, whichever database holds the catalog.

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
import threading
import time
from collections.abc import Collection, Iterator

from vifusion.catalog._database import Database
from vifusion.catalog._outbox import emit_job_end
from vifusion.catalog._records import JOB_COLUMNS, Job, LeaseLost, job_from_row

# Taking a job: what a taken job is set to (now, owner, until), what one taken too often is
# set to instead (error, now, owner), and which jobs can be taken (now). A job taken over
# starts again from nothing: its progress is the new run's.
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


class Leases(Database):
    """The lease methods of ``Catalog``."""

    def __init__(self) -> None:
        self._holders = threading.local()
        self.holder = None

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
        ``attempts`` one more, in one write transaction, so two takers never get the same job
        (SQLite has one writer at a time; PostgreSQL locks the row, and a second taker passes
        over it to the next). None: no such job.

        A job taken ``max_attempts`` times already is not run again: it is returned failed
        (``given_up``; the caller clears what its runs left in the shards)."""
        now = time.time()
        skip, skip_args = self._any_of("id", list(exclude))
        with self._transaction() as c:
            row = c.execute(
                f"SELECT id, video_id, attempts, stage, lease_owner FROM jobs WHERE {_TAKEABLE}"
                f" AND NOT ({skip}) ORDER BY created_at, {self.dialect.seq} LIMIT 1"
                + self.dialect.take,
                (now, *skip_args),
            ).fetchone()
            if row is None:
                return None
            if max_attempts is not None and row["attempts"] >= max_attempts:
                status, error = (
                    "failed",
                    given_up(row["attempts"], row["stage"], row["lease_owner"]),
                )
                change, args = _GIVEN_UP, (error, now, owner)
            else:
                status, error = "decoding", None
                change, args = _LEASED, (now, owner, now + lease_s)
            job = c.execute(
                f"UPDATE jobs SET {change} WHERE id=? RETURNING {JOB_COLUMNS}", (*args, row["id"])
            ).fetchone()
            c.execute(
                "UPDATE videos SET status=?, frames_indexed=0, error=? WHERE id=?",
                (status, error, row["video_id"]),
            )
            if status == "failed":  # its event in the same transaction
                emit_job_end(c, row["id"], row["video_id"], status, error)
        return job_from_row(job)

    def renew_leases(self, owner: str, lease_s: float) -> list[str]:
        """The heartbeat: every running job ``owner`` still holds is held ``lease_s`` more.
        Returns their ids (a job missing from them was taken over, or has ended)."""
        with self._transaction() as c:
            rows = c.execute(
                "UPDATE jobs SET lease_until=? WHERE lease_owner=?"
                " AND status IN ('decoding', 'indexing') RETURNING id",
                (time.time() + lease_s, owner),
            ).fetchall()
        return sorted(r["id"] for r in rows)

    def expire_leases(self, name: str) -> int:
        """End at once the leases of every incarnation of the worker ``name`` (owners
        ``name/...``): a restarted worker's first act, so that it (or any taker) retakes the
        jobs its last incarnation was running without waiting out their leases. Returns
        how many."""
        return self._write(
            "UPDATE jobs SET lease_until=NULL WHERE substr(lease_owner, 1, ?)=?"
            " AND status IN ('decoding', 'indexing')",
            (len(name) + 1, name + "/"),
        )

    def check_lease(self, job_id: str) -> None:
        """LeaseLost unless ``holder`` is unset or holds the job (before a step that undoes
        what the job sent, such as deleting its video's vectors for a fresh try)."""
        row = self._row("SELECT lease_owner FROM jobs WHERE id=?", (job_id,))
        if row is not None:
            check_holder(self.holder, job_id, row["lease_owner"])
