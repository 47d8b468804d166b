"""The catalog on each database: versioned migrations (a data dir from before versions opens
and keeps its rows), job leases that two takers never share, and keyword search that answers
alike on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading

import psycopg
import pytest

from tests._postgres import CatalogPlace
from vifusion.catalog import Catalog, open_catalog
from vifusion.catalog._postgres import PostgresCatalog
from vifusion.catalog._schema import SQLITE_MIGRATIONS, CatalogTooNew
from vifusion.catalog._sqlite import SqliteCatalog
from vifusion.config import Config

# The catalog as every release before versioned migrations wrote it (its CREATE statements,
# as they stood), with no schema_version table.
_UNVERSIONED = """
CREATE TABLE videos (id INTEGER PRIMARY KEY AUTOINCREMENT, source TEXT NOT NULL, title TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}', sha256 TEXT, size_bytes INTEGER, duration_s REAL, fps REAL,
    width INTEGER, height INTEGER, status TEXT NOT NULL, frames_indexed INTEGER NOT NULL DEFAULT 0,
    error TEXT, created_at REAL NOT NULL, media TEXT);
CREATE INDEX videos_sha ON videos(sha256);
CREATE TABLE jobs (id TEXT PRIMARY KEY, video_id INTEGER NOT NULL REFERENCES videos(id), status TEXT NOT NULL,
    progress REAL NOT NULL DEFAULT 0, frames_indexed INTEGER NOT NULL DEFAULT 0, error TEXT,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, stage TEXT, warnings TEXT NOT NULL DEFAULT '[]');
CREATE INDEX jobs_video ON jobs(video_id);
CREATE INDEX jobs_status ON jobs(status, created_at);
CREATE TABLE texts (id INTEGER PRIMARY KEY, video_id INTEGER NOT NULL REFERENCES videos(id),
    kind TEXT NOT NULL CHECK (kind IN ('speech', 'screen')), n INTEGER NOT NULL, start_s REAL NOT NULL,
    end_s REAL NOT NULL, text TEXT NOT NULL, UNIQUE (video_id, kind, n));
CREATE VIRTUAL TABLE texts_fts USING fts5(text, content='texts', content_rowid='id', tokenize='porter unicode61');
CREATE TRIGGER texts_ai AFTER INSERT ON texts BEGIN
    INSERT INTO texts_fts(rowid, text) VALUES (new.id, new.text);
END;
INSERT INTO videos (source, title, metadata, sha256, status, frames_indexed, created_at)
    VALUES ('/v/a.mp4', 'a', '{"team": "x"}', 'abc', 'ready', 12, 1.0);
INSERT INTO jobs (id, video_id, status, progress, frames_indexed, created_at, updated_at)
    VALUES ('j1', 1, 'ready', 1.0, 12, 1.0, 2.0);
INSERT INTO texts (video_id, kind, n, start_s, end_s, text) VALUES (1, 'speech', 0, 0.0, 2.0, 'Our mascot Zorblax');
"""


def test_a_catalog_from_before_versions_migrates_in_place_and_keeps_its_rows(tmp_path):
    path = tmp_path / "catalog.db"
    with sqlite3.connect(path) as c:
        c.executescript(_UNVERSIONED)
    cat = open_catalog(Config(data_dir=tmp_path))
    assert (cat.get_video(1).title, cat.get_video(1).metadata, cat.get_job("j1").status) == (
        "a",
        {"team": "x"},
        "ready",
    )
    assert [(h.video_id, h.snippet) for h in cat.keyword_search("zorblax")] == [
        (1, "Our mascot [Zorblax]")
    ]
    vid, _ = cat.add_video("/v/b.mp4", "b")
    assert vid == 2
    cat.close()
    with sqlite3.connect(path) as c:
        assert c.execute("SELECT version FROM schema_version").fetchall() == [
            (v,) for v in range(1, len(SQLITE_MIGRATIONS) + 1)
        ]  # once, however often opened
    open_catalog(Config(data_dir=tmp_path)).close()
    with sqlite3.connect(path) as c:
        assert c.execute("SELECT count(*) FROM schema_version").fetchone() == (
            len(SQLITE_MIGRATIONS),
        )


def test_a_catalog_a_later_release_migrated_is_refused(catalog):
    catalog.open().close()
    if catalog.backend == "sqlite":
        with sqlite3.connect(catalog.path) as c:
            c.execute("INSERT INTO schema_version VALUES (99, 0)")
    else:
        with psycopg.connect(catalog.url) as c:
            c.execute("INSERT INTO schema_version VALUES (99, 0)")
    with pytest.raises(CatalogTooNew, match="schema version 99"):
        catalog.open()


def test_a_read_only_opener_creates_nothing(catalog):
    with pytest.raises(sqlite3.OperationalError, match="no catalog"):
        catalog.open(read_only=True)
    catalog.open().add_video("/v/a.mp4", "a")
    reader = catalog.open(read_only=True)
    assert [v.title for v in reader.list_videos()] == ["a"]


def test_jobs_are_leased_oldest_first_each_once(catalog):
    cat = catalog.open()
    (v1, j1), (v2, j2) = cat.add_video("/v/1.mp4", "1"), cat.add_video("/v/2.mp4", "2")
    cat.update_job(j1, "failed", error="gone")
    assert cat.requeue(v1, "again", if_status="failed") is not None
    leased = cat.lease_job("a/1", 30.0)
    assert leased.id == j2 and leased.status == "decoding"
    assert (cat.get_video(v2).status, cat.get_job(j2).status) == ("decoding", "decoding")
    again = cat.lease_job("a/1", 30.0)
    assert again.video_id == v1 and cat.get_video(v1).error is None
    assert cat.lease_job("a/1", 30.0) is None


def test_a_job_another_taker_holds_is_passed_over_not_waited_for(postgres_url, tmp_path):
    """SKIP LOCKED: while one connection holds the oldest queued job's row (taking it), a
    second taker gets the next job at once."""
    place = CatalogPlace("postgres", tmp_path, postgres_url)
    try:
        cat = place.open()
        (_, first), (_, second) = cat.add_video("/v/1.mp4", "1"), cat.add_video("/v/2.mp4", "2")
        with psycopg.connect(
            place.url
        ) as other:  # not autocommit: the lock lasts until the end of the block
            other.execute("SELECT id FROM jobs WHERE id=%s FOR UPDATE", (first,))
            assert cat.lease_job("a/1", 30.0).id == second
            assert cat.lease_job("a/1", 30.0) is None  # the held one is not handed out either
        assert cat.lease_job("a/1", 30.0).id == first
    finally:
        place.close()


def test_takers_leasing_at_once_never_share_a_job(postgres_url, tmp_path):
    """Two catalogs (separate pools, as two processes have) lease from one queue at once."""
    place = CatalogPlace("postgres", tmp_path, postgres_url)
    try:
        jobs = {place.open().add_video(f"/v/{i}.mp4", str(i))[1] for i in range(60)}
        takers = [place.open(), place.open()]
        got: list[list[str]] = [[], []]
        start = threading.Barrier(4)

        def take(k: int) -> None:
            start.wait()
            while (job := takers[k // 2].lease_job(f"t/{k}", 30.0)) is not None:
                got[k % 2].append(job.id)

        threads = [threading.Thread(target=take, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        taken = got[0] + got[1]
        assert len(taken) == len(set(taken)) == len(jobs) and set(taken) == jobs
    finally:
        place.close()


def test_neither_database_runs_the_other_ones_code():
    """Each is a Catalog with every hook of its own (an abstract one left out could not be
    made), and neither inherits from the other: a method added to Catalog is written once
    for both, or as a hook each must write."""
    for one, other in ((SqliteCatalog, PostgresCatalog), (PostgresCatalog, SqliteCatalog)):
        assert issubclass(one, Catalog) and not one.__abstractmethods__
        assert other not in one.__mro__
    assert Catalog.__abstractmethods__  # the hooks: Catalog itself is no database


def test_an_unreachable_server_is_named_at_once(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://vifusion:secret@127.0.0.1:{port}/vifusion"
    with pytest.raises(
        ValueError, match=f"cannot reach the catalog at postgresql://vifusion@127.0.0.1:{port}/"
    ):
        open_catalog(Config(data_dir=tmp_path, catalog_url=url))
    for argv in (["list"], ["status"], ["search", "a cat"]):  # one line, no traceback, no password
        run = subprocess.run(
            [sys.executable, "-m", "vifusion.cli", *argv, "--data-dir", str(tmp_path)],
            env={**os.environ, "VIFUSION_CATALOG_URL": url},
            capture_output=True,
            text=True,
        )
        assert run.returncode == 2 and "cannot reach the catalog" in run.stderr, (argv, run.stderr)
        assert "Traceback" not in run.stderr and "secret" not in run.stderr


SPOKEN = [
    (0.0, 2.0, "Welcome to the quarterly budget review, budgets and more budgets."),
    (2.0, 4.0, "Our mascot Zorblax approved every budget line this year."),
    (4.0, 6.0, "The finance team meets on Tuesday in room 4200."),
    (6.0, 8.0, "Lorblax, as the captions spelt him, waved at the finance team."),
    (8.0, 9.0, "Weather: sunny, with a little rain after the review."),
    (
        9.0,
        30.0,
        " ".join(["A long stretch of talk about nothing in particular,"] * 6)
        + " then the budget again.",
    ),
    (
        30.0,
        40.0,
        "Item one: the rain plan. "
        + "Item two: what the finance team said about the weather and more. " * 3,
    ),
]
QUERIES = [
    "budget",
    "zorblax",
    "finance team",
    "budget review",
    "4200",
    "rain weather",
    "Zorblax budget",
    "talk budget",
    "nothing",
    "blorblax",
    "particular stretch",
    "finance weather",
    "nothing budget",
]


def test_both_databases_find_the_same_rows_in_the_same_order(tmp_path, postgres_url):
    """The same texts and queries on each: the same rows in the same order, the same BM25
    scores and coverage, the same snippets (cut and marked where FTS5 cuts and marks)."""
    places = [
        CatalogPlace("sqlite", tmp_path / "s", None),
        CatalogPlace("postgres", tmp_path / "p", postgres_url),
    ]
    (tmp_path / "s").mkdir()
    try:
        lite, pg = (p.open() for p in places)
        for cat in (lite, pg):
            for title in ("talk", "other"):
                cat.add_video(f"/v/{title}.mp4", title)
            cat.put_texts(1, "speech", SPOKEN)
            cat.put_texts(2, "screen", [(0.0, 5.0, "Budget 2024: finance")])
        for q in QUERIES:
            a, b = lite.keyword_search(q), pg.keyword_search(q)
            assert [(h.video_id, h.kind, h.n) for h in a] == [
                (h.video_id, h.kind, h.n) for h in b
            ], q
            assert [h.score for h in b] == pytest.approx([h.score for h in a], rel=1e-6), q
            assert [h.coverage for h in b] == [h.coverage for h in a], q
            assert [h.snippet for h in b] == [h.snippet for h in a], q
            keys = [(1, "speech", n) for n in range(len(SPOKEN))] + [(2, "screen", 0)]
            assert pg.texts_at(keys, query=q) == lite.texts_at(keys, query=q), q
    finally:
        for p in places:
            p.close()


def test_the_command_line_reads_the_catalog_catalog_url_names(
    postgres_url, tmp_path, monkeypatch, capsys
):
    """VIFUSION_CATALOG_URL reaches the commands that open the catalog: `vifusion list` and
    `vifusion transcript` read PostgreSQL, and the data dir holds no catalog.db."""
    import json

    from vifusion.cli import parser as cli

    place = CatalogPlace("postgres", tmp_path, postgres_url)
    try:
        cat = place.open()
        vid, job = cat.add_video("/v/talk.mp4", "talk")
        cat.put_texts(vid, "speech", [(0.0, 2.0, "Hello from PostgreSQL.")])
        cat.update_job(job, "ready", frames_indexed=3)
        monkeypatch.setenv("VIFUSION_CATALOG_URL", place.url)
        data = tmp_path / "data"
        assert cli.main(["list", "--json", "--data-dir", str(data)]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [(r["video_id"], r["title"], r["status"], r["frames"]) for r in rows] == [
            (vid, "talk", "ready", 3)
        ]
        assert cli.main(["transcript", "--data-dir", str(data), str(vid)]) == 0
        assert "Hello from PostgreSQL." in capsys.readouterr().out
        assert not (data / "catalog.db").exists()
    finally:
        place.close()


def test_a_server_restart_loses_no_acknowledged_write_and_the_catalog_reconnects(tmp_path):
    """The catalog's PostgreSQL crashes and starts again: what was acknowledged is
    there after, and the same Catalog carries on: the pool replaces the connections the
    server cut instead of handing them out."""
    from tests._postgres import PostgresServer, binaries

    server = PostgresServer(binaries())
    try:
        cat = open_catalog(Config(data_dir=tmp_path, catalog_url=server.url))
        vid, job = cat.add_video("/v/a.mp4", "a")
        cat.put_texts(vid, "speech", [(0.0, 1.0, "acknowledged before the restart")])
        cat.update_job(job, "ready", frames_indexed=5)
        server.restart()
        assert (cat.get_video(vid).status, cat.get_video(vid).frames_indexed) == ("ready", 5)
        assert [h.video_id for h in cat.keyword_search("restart")] == [vid]
        assert cat.add_video("/v/b.mp4", "b")[0] > vid  # never an id in use (a crash may skip some)
        cat.close()
    finally:
        server.stop()
