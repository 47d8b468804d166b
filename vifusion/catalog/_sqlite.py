"""The catalog in SQLite, the file DATA_DIR/catalog.db (one machine): its connections, and
keyword search with FTS5 (its unicode61 tokenizer, Porter stems, BM25, snippets).

WAL mode with ``synchronous=FULL``: a write that returned is on disk. One connection per
thread (sqlite3 connections must not cross threads). A write transaction takes the write
lock first (``BEGIN IMMEDIATE``), so what it read stays true until it commits: SQLite has
one writer at a time, so no statement needs to lock rows.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from vifusion.catalog._catalog import Catalog
from vifusion.catalog._database import Dialect, Row
from vifusion.catalog._records import NoCatalog
from vifusion.catalog._schema import migrate_sqlite
from vifusion.catalog._texts import TEXT_COLUMNS, Query
from vifusion.catalog._words import (
    FUZZY_WEIGHT,
    SEPARATOR,
    SNIPPET_TOKENS,
    index_words,
    with_near,
)

# A video's metadata as filters read it: NULL (matching no filter) where SQLite cannot read it
# (NaN, stored before ingest refused it), since one such row would fail every filtered query.
_FILTERABLE = "(CASE WHEN json_valid(metadata) THEN metadata END)"
_FTS = "FROM texts_fts JOIN texts t ON t.id = texts_fts.rowid WHERE texts_fts MATCH ?"
_MATCHING = "SELECT rowid AS id FROM texts_fts WHERE texts_fts MATCH ?"
_SNIPPET_ENGLISH = f"snippet(texts_fts, 1, ?, ?, '…', {SNIPPET_TOKENS})"


class SqliteCatalog(Catalog):
    """The catalog in one SQLite file."""

    dialect = Dialect(seq="rowid", lock="", take="", position="instr", matching=_MATCHING)

    def __init__(self, path: Path, read_only: bool = False) -> None:
        """Opened for writing, the file is created where missing and migrated to this
        release's schema. NoCatalog where a reader finds no catalog at ``path``."""
        super().__init__(read_only)
        self.path = Path(path)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []  # every thread's connection, for close()
        self._all_lock = threading.Lock()
        if read_only:
            self._conn()
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        migrate_sqlite(self.path)

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
            conn.row_factory = _dict_row
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    @contextlib.contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        yield self._conn()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        c = self._conn()
        with c:
            c.execute("BEGIN IMMEDIATE")  # the write lock before the reads: no writer between
            yield c

    def close(self) -> None:
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()

    def _any_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{column} IN (SELECT value FROM json_each(?))", [json.dumps(list(values))]

    def _metadata_is(self, key: str, value: Any) -> tuple[str, list[Any]]:
        # json_type tells 1 from true; json_extract alone would not.
        path = f'$."{key}"'
        if isinstance(value, bool):
            return f"json_type({_FILTERABLE}, ?) = ?", [path, "true" if value else "false"]
        return (
            f"json_extract({_FILTERABLE}, ?) IS ?"
            f" AND json_type({_FILTERABLE}, ?) NOT IN ('true', 'false')",
            [path, value, path],
        )

    # -- keyword search with FTS5 -----------------------------------------------------

    def _insert_texts(self, c: sqlite3.Connection, rows: list[tuple]) -> None:
        # The triggers of _schema.py put each row's words and English in the keyword index.
        c.executemany(
            f"INSERT INTO texts ({TEXT_COLUMNS}, words) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows
        )

    def _phrases(self, c: sqlite3.Connection, words: list[str]) -> dict[str, str]:
        # FTS5 cuts and stems them itself, as it cuts the rows' ``words``.
        return {w: index_words(w) for w in words}

    def _term(self, term: str) -> str:
        return term

    def _match(self, phrases: Sequence[str]) -> str | None:
        """Each phrase quoted (a '"' doubled): never FTS5 syntax."""
        return " OR ".join('"' + p.replace('"', '""') + '"' for p in phrases) or None

    def _vocabulary(self, c: sqlite3.Connection) -> str:
        c.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.texts_vocab USING fts5vocab(main, texts_fts, row)"
        )
        return "SELECT term, doc AS ndoc FROM temp.texts_vocab"

    def _rank(
        self, c: sqlite3.Connection, q: Query, where: str, args: list, limit: int
    ) -> dict[int, float]:
        def bm25(phrases: list[str]) -> dict[int, float]:
            if not phrases:
                return {}
            rows = c.execute(
                f"SELECT t.id, -bm25(texts_fts) AS score {_FTS} AND {where}"
                " ORDER BY bm25(texts_fts), t.video_id, t.start_s, t.n LIMIT ?",
                [self._match(phrases), *args, int(limit)],
            )
            return {r["id"]: r["score"] for r in rows}

        return with_near(bm25(q.exact), bm25(q.spelt))

    def _hits(
        self, c: sqlite3.Connection, ids: list[int], q: Query, marks: tuple[str, str]
    ) -> dict[int, tuple[Row, str, str | None, float]]:
        rows = c.execute(
            f"SELECT t.id, {self._columns(c, TEXT_COLUMNS)},"
            f" snippet(texts_fts, 0, ?, ?, '…', {SNIPPET_TOKENS}) AS snippet,"
            f" {self._english(c, _SNIPPET_ENGLISH)}"
            f" AS snippet_english {_FTS} AND t.id IN (SELECT value FROM json_each(?))",
            (*marks, *marks, self._match(q.exact + q.spelt), json.dumps(ids)),
        ).fetchall()
        found = [r["id"] for r in rows]
        held = dict.fromkeys(found, 0.0)  # the share of the words each holds
        for w in q.words:
            exact = self._holding(c, [q.phrases[w]], found)
            for i in exact:
                held[i] += 1.0
            for i in self._holding(c, q.near.get(w, []), found) - exact:
                held[i] += FUZZY_WEIGHT
        return {
            r["id"]: (
                r,
                _shown(r["snippet"]),
                r["snippet_english"] if r["english"] else None,
                held[r["id"]] / len(q.words),
            )
            for r in rows
        }

    def _holding(self, c: sqlite3.Connection, phrases: list[str], ids: list[int]) -> set[int]:
        """The text rows among ``ids`` holding any of ``phrases``."""
        if not phrases:
            return set()
        rows = c.execute(
            f"{self.dialect.matching} AND rowid IN (SELECT value FROM json_each(?))",
            (self._match(phrases), json.dumps(ids)),
        )
        return {r["id"] for r in rows}

    def _texts_columns(self, c: sqlite3.Connection) -> set[str]:
        return {r["name"] for r in c.execute("PRAGMA table_info(texts)")}

    def _english(self, c: sqlite3.Connection, call: str) -> str:
        """``call`` of the keyword index's English column; where the index has none (a catalog
        from before it, opened to read), NULL, its marks' arguments still taken."""
        if self._has(c, "words"):
            return call
        return "(CASE WHEN ? IS NULL AND ? IS NULL THEN NULL END)"

    def _rows_at(self, c: sqlite3.Connection, keys: list[tuple[int, str, int]]) -> dict[int, Row]:
        rows = c.execute(
            f"SELECT t.id, {self._columns(c, TEXT_COLUMNS)} FROM texts t"
            " JOIN json_each(?) j ON t.video_id = json_extract(j.value, '$[0]')"
            " AND t.kind = json_extract(j.value, '$[1]') AND t.n = json_extract(j.value, '$[2]')",
            (json.dumps(keys),),
        )
        return {r["id"]: r for r in rows}

    def _highlights(
        self, c: sqlite3.Connection, found: dict[int, Row], q: Query, marks: tuple[str, str]
    ) -> dict[int, tuple[str | None, str | None]]:
        rows = c.execute(
            "SELECT rowid AS id, highlight(texts_fts, 0, ?, ?) AS marked,"
            f" {self._english(c, 'highlight(texts_fts, 1, ?, ?)')} AS marked_english FROM texts_fts"
            " WHERE texts_fts MATCH ? AND rowid IN (SELECT value FROM json_each(?))",
            (*marks, *marks, self._match(q.exact + q.spelt), json.dumps(list(found))),
        )
        return {
            r["id"]: (
                _shown(r["marked"]) if marks[0] in r["marked"] else None,
                r["marked_english"] if marks[0] in (r["marked_english"] or "") else None,
            )
            for r in rows
        }


def _shown(words: str) -> str:
    """A row's ``words`` as a reader sees them: its text (``_words.index_words`` undone)."""
    return words.replace(SEPARATOR, "")


def _dict_row(cursor: sqlite3.Cursor, row: tuple) -> Row:
    """Rows as dicts, as PostgreSQL's come: the statements written once read them alike."""
    return {d[0]: v for d, v in zip(cursor.description, row, strict=True)}


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that reads ``path`` and leaves the data dir as it found it.

    Opened read-write (never created), not ``mode=ro``: a read-only connection to a WAL
    database cannot remove the -wal and -shm files it creates, while the last read-write
    connection to close removes them. (Not ``query_only`` either: keyword search makes a
    temp table.) Where the file or its folder cannot be written, ``mode=ro``; where even
    that cannot open it (no -shm there and none can be made), ``immutable``, which is safe
    then: no writer can be at work in that folder."""
    where = path.resolve().as_uri()
    for mode in ("mode=rw", "mode=ro", "immutable=1"):
        try:
            conn = sqlite3.connect(f"{where}?{mode}", uri=True, timeout=30, check_same_thread=False)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the file
            return conn
        except sqlite3.OperationalError as e:
            if "no such" in str(e) or not path.is_file():
                raise NoCatalog(f"no catalog at {path}") from None
            last = e
    raise last
