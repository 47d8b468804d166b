"""Job leases on each database: takers never share a job, a job whose holder stopped renewing
is taken over, the old holder's writes are refused, a restarted worker retakes its own jobs at
once, and a catalog from before leases migrates (its interrupted jobs are taken over)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from vifusion._catalog_schema import (
    POSTGRES_MIGRATIONS,
    SQLITE_MIGRATIONS,
    migrate_postgres,
    migrate_sqlite,
)
from vifusion.catalog import LeaseLost


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
    assert cat.lease_job("b/1", 30.0).id == job


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
    if catalog.backend == "sqlite":
        import sqlite3

        with sqlite3.connect(catalog.path) as c:
            versions = [r[0] for r in c.execute("SELECT version FROM schema_version")]
    else:
        with psycopg.connect(catalog.url) as c:
            versions = [r[0] for r in c.execute("SELECT version FROM schema_version")]
    assert versions == [1, 2]


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
