"""Job leases on each database: takers never share a job, a job whose holder stopped renewing
is taken over, the old holder's writes are refused (also between threads of one catalog), a
restarted worker retakes its own jobs at once, a taker passes over the jobs its own process
runs, a job whose workers keep dying is failed instead of taken again, and a catalog from
before leases migrates (its interrupted jobs are taken over)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from vifusion.catalog import LeaseLost
from vifusion.catalog._schema import (
    POSTGRES_MIGRATIONS,
    SQLITE_MIGRATIONS,
    migrate_postgres,
    migrate_sqlite,
)


def _holding(place, owner: str):
    cat = place.open()
    cat.holder = owner
    return cat


def test_two_owners_leasing_at_once_never_get_one_job_twice(catalog):
    jobs = {catalog.open().add_video(f"/v/{i}.mp4", str(i))[1] for i in range(40)}
    takers = [_holding(catalog, "a/1"), _holding(catalog, "b/1")]
    got: list[list[str]] = [[], []]
    start = threading.Barrier(4)

    def take(k: int) -> None:  # two threads per owner, each with its own connection
        owner = k % 2
        start.wait()
        while (job := takers[owner].lease_job(takers[owner].holder, 30.0)) is not None:
            got[owner].append(job.id)

    threads = [threading.Thread(target=take, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    taken = got[0] + got[1]
    assert len(taken) == len(set(taken)) == len(jobs) and set(taken) == jobs
    reader = catalog.open()
    assert {reader.get_job(j).lease_owner for j in got[0]} <= {"a/1"}
    assert {reader.get_job(j).lease_owner for j in got[1]} <= {"b/1"}


def test_an_expired_lease_is_taken_over_and_the_old_holder_is_refused(catalog):
    old, new = _holding(catalog, "a/1"), _holding(catalog, "b/1")
    vid, job = old.add_video("/v/a.mp4", "a")
    assert old.lease_job("a/1", 30.0).id == job
    old.update_job(job, "indexing", progress=0.5, frames_indexed=6, stage="frames")
    assert new.lease_job("b/1", 30.0) is None  # held, and renewed in time: not taken

    assert old.renew_leases("a/1", 0.0) == [job]  # the holder's last renewal, then silence
    time.sleep(0.01)
    taken = new.lease_job("b/1", 30.0)
    assert (taken.id, taken.status, taken.progress, taken.frames_indexed, taken.stage) == (
        job,
        "decoding",
        0.0,
        0,
        None,
    )  # from the start of its video

    # The old holder can neither record progress nor end the job, and learns it lost it.
    for status in ("indexing", "ready", "failed"):
        with pytest.raises(LeaseLost, match="b/1 took it over"):
            old.update_job(job, status, frames_indexed=12)
    with pytest.raises(LeaseLost):
        old.check_lease(job)
    assert old.renew_leases("a/1", 30.0) == []
    stored = new.get_job(job)
    assert (stored.status, stored.frames_indexed, stored.lease_owner) == ("decoding", 0, "b/1")
    assert new.get_video(vid).status == "decoding"

    # The new holder runs it to its end.
    assert new.renew_leases("b/1", 30.0) == [job]
    new.check_lease(job)
    new.update_job(job, "ready", frames_indexed=12)
    assert (new.get_job(job).status, new.get_video(vid).frames_indexed) == ("ready", 12)
    assert new.renew_leases("b/1", 30.0) == []  # an ended job is not held
    assert new.lease_job("b/1", 30.0) is None


def test_a_restarted_worker_retakes_its_own_jobs_at_once_and_no_one_elses(catalog):
    cat = catalog.open()
    _, mine = cat.add_video("/v/a.mp4", "a")
    _, theirs = cat.add_video("/v/b.mp4", "b")
    assert cat.lease_job("pool/first", 30.0).id == mine
    assert cat.lease_job("poolx/1", 30.0).id == theirs
    # The worker "pool" restarts: its new incarnation ends its old one's leases, and takes
    # the job back without waiting them out; "poolx"'s job stays with poolx.
    assert cat.expire_leases("pool") == 1
    assert cat.lease_job("pool/second", 30.0).id == mine
    assert cat.lease_job("pool/second", 30.0) is None
    assert cat.get_job(theirs).lease_owner == "poolx/1"
    first = catalog.open()
    first.holder = "pool/first"
    with pytest.raises(LeaseLost):
        first.update_job(mine, "indexing", progress=0.1)


def test_a_job_put_back_in_the_queue_lets_go_of_its_lease(catalog):
    cat = _holding(catalog, "a/1")
    _, job = cat.add_video("/v/a.mp4", "a")
    cat.lease_job("a/1", 30.0)
    cat.update_job(job, "queued", progress=0.0, frames_indexed=0)  # a full data dir, say
    stored = cat.get_job(job)
    assert (stored.status, stored.lease_owner, stored.lease_until) == ("queued", None, None)
    assert stored.attempts == 0  # put back by a live worker: not a death
    assert cat.lease_job("b/1", 30.0).id == job


def test_a_job_whose_workers_keep_dying_is_failed_instead_of_taken_again(catalog):
    """The pool dies in a job's fetch (say), Ray restarts it, it takes the job again, dies
    again: the fourth take (max_attempts 3) fails it, saying why, and nobody takes it after."""
    cat = catalog.open()
    vid, job = cat.add_video("https://example.org/bomb.mp4", "bomb")
    _, next_job = cat.add_video("/v/b.mp4", "b")
    for n in (1, 2, 3):
        cat.expire_leases("pool")  # the restarted pool's first act
        taken = cat.lease_job(f"pool/{n}", 30.0, max_attempts=3)
        assert (taken.id, taken.status, taken.attempts) == (job, "decoding", n)
        holder = _holding(catalog, f"pool/{n}")
        holder.update_job(job, "decoding", stage="fetching")  # then it dies
    cat.expire_leases("pool")
    failed = cat.lease_job("pool/4", 30.0, max_attempts=3)
    reason = "the ingest worker died 3 times while running this job (last: in stage fetching, worker pool/3)"
    assert (failed.id, failed.status, failed.error) == (job, "failed", reason)
    assert (cat.get_video(vid).status, cat.get_video(vid).error) == ("failed", reason)
    assert cat.get_job(job).status == "failed"
    assert cat.lease_job("pool/4", 30.0, max_attempts=3).id == next_job  # the queue goes on
    cat.expire_leases("pool")
    assert cat.lease_job("pool/5", 30.0, max_attempts=3).id == next_job  # never the failed one


def test_a_taker_passes_over_the_jobs_its_own_process_runs(catalog):
    """A catalog outage longer than the lease: the job's lease ran out while its worker still
    runs it; a sibling worker of the same process, told which jobs run there, leaves it."""
    cat = catalog.open()
    _, running = cat.add_video("/v/a.mp4", "a")
    _, queued = cat.add_video("/v/b.mp4", "b")
    assert cat.lease_job("pool/1/ingest-0", 0.0).id == running
    time.sleep(0.01)  # its lease ran out
    assert cat.lease_job("pool/1/ingest-1", 30.0, exclude={running}).id == queued
    assert cat.lease_job("pool/1/ingest-1", 30.0, exclude={running, queued}) is None
    assert cat.get_job(running).lease_owner == "pool/1/ingest-0"
    assert cat.renew_leases("pool/1/ingest-0", 30.0) == [running]  # the outage ends: kept


def test_threads_holding_different_leases_on_one_catalog_fence_each_other(catalog):
    cat = catalog.open()
    cat.holder = "pool/1"  # writes outside a worker's block: no job held by a worker
    _, first = cat.add_video("/v/a.mp4", "a")
    _, second = cat.add_video("/v/b.mp4", "b")
    assert cat.lease_job("pool/1/ingest-0", 30.0).id == first
    assert cat.lease_job("pool/1/ingest-1", 30.0).id == second
    refused: list[str] = []

    def worker(owner: str, mine: str, theirs: str) -> None:
        with cat.holding(owner):
            cat.update_job(mine, "indexing", progress=0.5)
            try:
                cat.update_job(theirs, "failed", error="not mine")
            except LeaseLost:
                refused.append(owner)

    threads = [
        threading.Thread(target=worker, args=("pool/1/ingest-0", first, second)),
        threading.Thread(target=worker, args=("pool/1/ingest-1", second, first)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(refused) == ["pool/1/ingest-0", "pool/1/ingest-1"]
    assert [cat.get_job(j).status for j in (first, second)] == ["indexing", "indexing"]
    with pytest.raises(LeaseLost):  # this thread is in no block: it writes as "pool/1"
        cat.update_job(first, "ready")


def test_a_catalog_from_before_leases_migrates_and_its_interrupted_job_is_taken(catalog):
    """Schema version 1 (no lease columns), with a job a crash left mid-indexing: it opens
    at the last version, and that job, never leased, is taken at once."""
    if catalog.backend == "sqlite":
        migrate_sqlite(catalog.path, SQLITE_MIGRATIONS[:1])
        old = _version_1_sqlite(catalog.path)
    else:
        with psycopg.connect(catalog.url, autocommit=True) as c:
            c.row_factory = psycopg.rows.dict_row
            migrate_postgres(c, "test", POSTGRES_MIGRATIONS[:1])
            old = _version_1_postgres(c)
    cat = catalog.open()
    assert cat.get_job(old).lease_owner is None and cat.get_job(old).status == "indexing"
    taken = cat.lease_job("pool/1", 30.0)
    assert (taken.id, taken.lease_owner, taken.frames_indexed) == (old, "pool/1", 0)
    assert taken.attempts == 1  # counted from the migration: 0 before
    if catalog.backend == "sqlite":
        import sqlite3

        with sqlite3.connect(catalog.path) as c:
            versions = [r[0] for r in c.execute("SELECT version FROM schema_version")]
    else:
        with psycopg.connect(catalog.url) as c:
            versions = [r[0] for r in c.execute("SELECT version FROM schema_version")]
    assert versions == list(range(1, len(SQLITE_MIGRATIONS) + 1))


def _version_1_sqlite(path) -> str:
    import sqlite3

    with sqlite3.connect(path) as c:
        c.execute(
            "INSERT INTO videos (id, source, title, status, created_at) VALUES"
            " (1, '/v/a.mp4', 'a', 'indexing', 1.0)"
        )
        c.execute(
            "INSERT INTO jobs (id, video_id, status, progress, frames_indexed, created_at, updated_at)"
            " VALUES ('j1', 1, 'indexing', 0.5, 6, 1.0, 2.0)"
        )
    return "j1"


def _version_1_postgres(c) -> str:
    c.execute(
        "INSERT INTO videos (id, source, title, status, created_at) VALUES"
        " (1, '/v/a.mp4', 'a', 'indexing', 1.0)"
    )
    c.execute(
        "INSERT INTO jobs (id, video_id, status, progress, frames_indexed, created_at, updated_at)"
        " VALUES ('j1', 1, 'indexing', 0.5, 6, 1.0, 2.0)"
    )
    return "j1"
