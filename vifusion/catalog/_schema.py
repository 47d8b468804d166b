"""The catalog's schema, one list of migrations per database, applied in order.

``schema_version`` holds one row per migration applied. Opening a catalog for writing
applies the ones it lacks (step i takes version i - 1 to i) in one transaction under a lock,
so two processes opening at once migrate once. A catalog of a later release is refused. A
released step is never edited: a change is a new step. SQLite's step 1 brings a catalog of
any release before versioning to the schema of that time, so old data dirs migrate in place.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any

from vifusion.catalog._database import QmarkConnection
from vifusion.catalog._pg_words import entries
from vifusion.catalog._words import index_words


class CatalogTooNew(RuntimeError):
    """The catalog was migrated by a later release than this one."""


_SQLITE_TABLES = """
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
    updated_at REAL NOT NULL,
    stage TEXT,
    warnings TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS jobs_video ON jobs(video_id);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status, created_at);
"""
# A text row's (video_id, kind, n) is its vector's id in the shards (``types.speech_id``,
# ``screen_id``). ``id`` is the keyword index's key: an explicit INTEGER PRIMARY KEY, since
# VACUUM may renumber an implicit rowid, which would cut the index off from its rows. The
# triggers keep the index (external content: it stores no second copy of the text) in step.
_SQLITE_TEXTS = """
CREATE TABLE IF NOT EXISTS texts (
    id INTEGER PRIMARY KEY,
    video_id INTEGER NOT NULL REFERENCES videos(id),
    kind TEXT NOT NULL CHECK (kind IN ('speech', 'screen')),
    n INTEGER NOT NULL,
    start_s REAL NOT NULL,
    end_s REAL NOT NULL,
    text TEXT NOT NULL,
    UNIQUE (video_id, kind, n)
);
CREATE VIRTUAL TABLE IF NOT EXISTS texts_fts USING fts5(
    text, content='texts', content_rowid='id', tokenize='porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS texts_ai AFTER INSERT ON texts BEGIN
    INSERT INTO texts_fts(rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER IF NOT EXISTS texts_ad AFTER DELETE ON texts BEGIN
    INSERT INTO texts_fts(texts_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
CREATE TRIGGER IF NOT EXISTS texts_au AFTER UPDATE ON texts BEGIN
    INSERT INTO texts_fts(texts_fts, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO texts_fts(rowid, text) VALUES (new.id, new.text);
END;
"""


def _sqlite_script(c: sqlite3.Connection, script: str) -> None:
    """Run ``script`` statement by statement inside the caller's transaction (executescript
    would commit first)."""
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            c.execute(buf)
            buf = ""


def _sqlite_1(c: sqlite3.Connection) -> None:
    """The schema as it stood when versions began, from any earlier release's catalog."""
    _sqlite_script(c, _SQLITE_TABLES)
    columns = {r[1] for r in c.execute("PRAGMA table_info(videos)")}
    if "media" not in columns:  # catalogs written before uploads existed
        c.execute("ALTER TABLE videos ADD COLUMN media TEXT")
    job_columns = {r[1] for r in c.execute("PRAGMA table_info(jobs)")}
    if "stage" not in job_columns:  # catalogs written before jobs named their stages
        c.execute("ALTER TABLE jobs ADD COLUMN stage TEXT")
    if "warnings" not in job_columns:
        c.execute("ALTER TABLE jobs ADD COLUMN warnings TEXT NOT NULL DEFAULT '[]'")
    try:
        _sqlite_script(c, _SQLITE_TEXTS)
    except sqlite3.OperationalError as e:
        if "fts5" in str(e):
            raise RuntimeError(
                f"this Python's SQLite ({sqlite3.sqlite_version}) lacks FTS5, which the "
                "keyword search of speech and screen text needs"
            ) from e
        raise


def _sqlite_2(c: sqlite3.Connection) -> None:
    """Job leases: who runs a job and until when (``Catalog.lease_job``)."""
    c.execute("ALTER TABLE jobs ADD COLUMN lease_owner TEXT")
    c.execute("ALTER TABLE jobs ADD COLUMN lease_until REAL")


def _sqlite_3(c: sqlite3.Connection) -> None:
    """How many times ingest workers took each job since it was queued
    (``Catalog.lease_job``): a job whose workers keep dying is failed, not taken forever."""
    c.execute("ALTER TABLE jobs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0")


def _sqlite_4(c: sqlite3.Connection) -> None:
    """The spoken language (ISO 639-1, None: not known) of each video and speech row, and
    ``english``: a non-English speech row's English rendering (Whisper's translate task;
    None where the row is English or was not translated). Columns only where missing."""
    for table, columns in (("texts", ("language", "english")), ("videos", ("language",))):
        have = {r[1] for r in c.execute(f"PRAGMA table_info({table})")}
        for column in columns:
            if column not in have:
                c.execute(f"ALTER TABLE {table} ADD COLUMN {column} TEXT")


# The keyword index from step 5 on: a row's ``words`` (its text as ``_words.index_words``
# cuts it) and its English rendering, diacritics all folded ("Việt" as "viet").
_SQLITE_WORDS_INDEX = """
CREATE VIRTUAL TABLE texts_fts USING fts5(
    words, english, content='texts', content_rowid='id',
    tokenize='porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER texts_ai AFTER INSERT ON texts BEGIN
    INSERT INTO texts_fts(rowid, words, english) VALUES (new.id, new.words, new.english);
END;
CREATE TRIGGER texts_ad AFTER DELETE ON texts BEGIN
    INSERT INTO texts_fts(texts_fts, rowid, words, english)
    VALUES ('delete', old.id, old.words, old.english);
END;
CREATE TRIGGER texts_au AFTER UPDATE ON texts BEGIN
    INSERT INTO texts_fts(texts_fts, rowid, words, english)
    VALUES ('delete', old.id, old.words, old.english);
    INSERT INTO texts_fts(rowid, words, english) VALUES (new.id, new.words, new.english);
END;
"""


def _sqlite_5(c: sqlite3.Connection) -> None:
    """Words in every language: the keyword index reads ``words`` (Chinese, Japanese and
    Thai cut into characters, ``_words.index_words``) and ``english`` (a row's English
    rendering: an English query finds the Spanish sentence), and folds every diacritic.
    Existing rows are indexed again."""
    if "words" not in {r[1] for r in c.execute("PRAGMA table_info(texts)")}:
        c.execute("ALTER TABLE texts ADD COLUMN words TEXT NOT NULL DEFAULT ''")
    for trigger in ("texts_ai", "texts_ad", "texts_au"):
        c.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    c.execute("DROP TABLE IF EXISTS texts_fts")
    rows = c.execute("SELECT id, text FROM texts").fetchall()
    c.executemany("UPDATE texts SET words=? WHERE id=?", [(index_words(t), i) for i, t in rows])
    _sqlite_script(c, _SQLITE_WORDS_INDEX)
    c.execute("INSERT INTO texts_fts(texts_fts) VALUES ('rebuild')")


# API keys (``_keys.py``): the SHA-256 of each key's secret, never the key. A later step may
# add a nullable column (a key's collections, NULL: every one) without touching these rows.
_KEYS_TABLE = """
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL DEFAULT '',
    scope TEXT NOT NULL CHECK (scope IN ('search', 'ingest', 'admin')),
    created_at {real} NOT NULL,
    expires_at {real},
    revoked_at {real},
    secret_sha256 TEXT NOT NULL
);
"""


def _sqlite_6(c: sqlite3.Connection) -> None:
    """API keys with scopes, stored hashed (``_keys.py``)."""
    c.execute(_KEYS_TABLE.format(real="REAL"))


# Collections (issue 56): each video in one (every video before this step in ``default``),
# and the collections a key is limited to, a JSON list (NULL: every collection).
_COLLECTIONS = """
ALTER TABLE videos ADD COLUMN IF NOT EXISTS collection TEXT NOT NULL DEFAULT 'default';
CREATE INDEX IF NOT EXISTS videos_collection ON videos(collection, id);
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS collections TEXT;
"""


def _sqlite_7(c: sqlite3.Connection) -> None:
    """Collections, as ``_COLLECTIONS`` (columns only where missing: SQLite's ALTER TABLE
    has no IF NOT EXISTS, and step 1 may have made a pre-versioning catalog's tables)."""
    for table, column, kind in (
        ("videos", "collection", "TEXT NOT NULL DEFAULT 'default'"),
        ("api_keys", "collections", "TEXT"),
    ):
        if column not in {r[1] for r in c.execute(f"PRAGMA table_info({table})")}:
            c.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    c.execute("CREATE INDEX IF NOT EXISTS videos_collection ON videos(collection, id)")


# Webhooks (``_outbox.py``): the hooks (their secrets as they are: they sign what is sent),
# the outbox's events (the JSON body as sent) and one delivery row per event and hook.
_WEBHOOKS = """
CREATE TABLE IF NOT EXISTS webhooks (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    events TEXT NOT NULL,
    collection TEXT,
    created_at {real} NOT NULL,
    secret TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS hook_events (
    id TEXT PRIMARY KEY,
    type TEXT NOT NULL,
    created_at {real} NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS hook_deliveries (
    event_id TEXT NOT NULL REFERENCES hook_events(id),
    hook_id TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    next_at {real} NOT NULL,
    lease_until {real},
    last_at {real},
    last_status INTEGER,
    last_error TEXT,
    PRIMARY KEY (event_id, hook_id)
);
CREATE INDEX IF NOT EXISTS hook_deliveries_due ON hook_deliveries(status, next_at);
CREATE INDEX IF NOT EXISTS hook_deliveries_hook ON hook_deliveries(hook_id, last_at);
"""


def _sqlite_8(c: sqlite3.Connection) -> None:
    """Webhooks and their outbox (``_WEBHOOKS``)."""
    _sqlite_script(c, _WEBHOOKS.format(real="REAL"))


SQLITE_MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _sqlite_1,
    _sqlite_2,
    _sqlite_3,
    _sqlite_4,
    _sqlite_5,
    _sqlite_6,
    _sqlite_7,
    _sqlite_8,
]

# PostgreSQL: the same tables. ``jobs.seq`` orders jobs added in the same instant, as SQLite's
# rowid does. ``texts.tsv`` is the keyword index's entry of a row: its tokens' stems at their
# positions, made by the catalog (``_postgres.py``), so the words are cut as SQLite's FTS5 cuts
# them; ``n_tokens`` is the row's length for BM25. Metadata stays text (as the user sent it,
# keys in order); filters read it as jsonb.
_POSTGRES_1 = """
CREATE TABLE videos (
    id BIGSERIAL PRIMARY KEY,
    source TEXT NOT NULL,
    title TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    sha256 TEXT,
    size_bytes BIGINT,
    duration_s DOUBLE PRECISION,
    fps DOUBLE PRECISION,
    width INTEGER,
    height INTEGER,
    status TEXT NOT NULL,
    frames_indexed BIGINT NOT NULL DEFAULT 0,
    error TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    media TEXT
);
CREATE INDEX videos_sha ON videos(sha256);
CREATE INDEX videos_status ON videos(status, id);
CREATE TABLE jobs (
    seq BIGSERIAL NOT NULL,
    id TEXT PRIMARY KEY,
    video_id BIGINT NOT NULL REFERENCES videos(id),
    status TEXT NOT NULL,
    progress DOUBLE PRECISION NOT NULL DEFAULT 0,
    frames_indexed BIGINT NOT NULL DEFAULT 0,
    error TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    stage TEXT,
    warnings TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX jobs_video ON jobs(video_id);
CREATE INDEX jobs_status ON jobs(status, created_at, seq);
CREATE TABLE texts (
    id BIGSERIAL PRIMARY KEY,
    video_id BIGINT NOT NULL REFERENCES videos(id),
    kind TEXT NOT NULL CHECK (kind IN ('speech', 'screen')),
    n INTEGER NOT NULL,
    start_s DOUBLE PRECISION NOT NULL,
    end_s DOUBLE PRECISION NOT NULL,
    text TEXT NOT NULL,
    tsv TSVECTOR NOT NULL,
    n_tokens INTEGER NOT NULL,
    UNIQUE (video_id, kind, n)
);
CREATE INDEX texts_tsv ON texts USING GIN (tsv);
"""
_POSTGRES_2 = """
ALTER TABLE jobs ADD COLUMN lease_owner TEXT, ADD COLUMN lease_until DOUBLE PRECISION;
"""
_POSTGRES_3 = """
ALTER TABLE jobs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
"""
# The spoken language of each video and speech row, and a speech row's English rendering
# (as _sqlite_4).
_POSTGRES_4 = """
ALTER TABLE texts ADD COLUMN IF NOT EXISTS language TEXT, ADD COLUMN IF NOT EXISTS english TEXT;
ALTER TABLE videos ADD COLUMN IF NOT EXISTS language TEXT;
"""


def _postgres_5(conn: Any) -> None:
    """Words in every language (as _sqlite_5): each row's entry made again from its text
    (Chinese, Japanese and Thai cut into characters) and its English rendering, whose
    tokens ``n_english`` counts."""

    c = QmarkConnection(conn)
    c.execute("ALTER TABLE texts ADD COLUMN IF NOT EXISTS n_english INTEGER NOT NULL DEFAULT 0")
    rows = c.execute("SELECT id, text, english FROM texts").fetchall()
    c.executemany(
        "UPDATE texts SET tsv=?::tsvector, n_tokens=?, n_english=? WHERE id=?",
        [(*entry, r["id"]) for r, entry in zip(rows, entries(c, rows), strict=True)],
    )


POSTGRES_MIGRATIONS: list[str | Callable[[Any], None]] = [
    _POSTGRES_1,
    _POSTGRES_2,
    _POSTGRES_3,
    _POSTGRES_4,
    _postgres_5,
    _KEYS_TABLE.format(real="DOUBLE PRECISION"),  # API keys, as _sqlite_6
    _COLLECTIONS,  # collections, as _sqlite_7
    _WEBHOOKS.format(real="DOUBLE PRECISION"),  # webhooks, as _sqlite_8
]
_PG_LOCK = 0x76696675  # the advisory lock that migrations hold ("vifu")


def migrate_sqlite(
    path: Any, migrations: list[Callable[[sqlite3.Connection], None]] = SQLITE_MIGRATIONS
) -> int:
    """Bring the SQLite catalog at ``path`` to the last version; returns it. One connection of
    its own, in autocommit mode, so that the steps and their record are one transaction."""
    c = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("BEGIN IMMEDIATE")  # the write lock: another opener waits, then finds it done
        try:
            c.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
            )
            have = _current(
                c.execute("SELECT max(version) FROM schema_version").fetchone()[0], migrations, path
            )
            for version in range(have + 1, len(migrations) + 1):
                migrations[version - 1](c)
                c.execute("INSERT INTO schema_version VALUES (?, ?)", (version, time.time()))
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
    finally:
        c.close()
    return len(migrations)


def migrate_postgres(
    conn: Any, where: str, migrations: list[str | Callable[[Any], None]] = POSTGRES_MIGRATIONS
) -> int:
    """Bring the PostgreSQL catalog ``conn`` reaches to the last version; returns it. Under
    a transaction-wide advisory lock, so concurrent openers (API replicas starting) queue."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_PG_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version"
            " (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
        )
        have = _current(
            conn.execute("SELECT max(version) AS v FROM schema_version").fetchone()["v"],
            migrations,
            where,
        )
        for version in range(have + 1, len(migrations) + 1):
            step = migrations[version - 1]
            if callable(step):
                step(conn)
            else:
                conn.execute(step)
            conn.execute("INSERT INTO schema_version VALUES (%s, %s)", (version, time.time()))
    return len(migrations)


def _current(found: int | None, migrations: list, where: Any) -> int:
    have = found or 0
    if have > len(migrations):
        raise CatalogTooNew(
            f"the catalog at {where} is at schema version {have}; this release of vifusion "
            f"knows versions up to {len(migrations)}: run a release at least as new"
        )
    return have
