"""The catalog in PostgreSQL (``catalog_url``): SQLite's answers, for a cluster whose nodes
share no disk.

Connections come from a pool (psycopg 3), each in autocommit: a write that returns has been
committed (PostgreSQL's ``synchronous_commit`` makes that durable); writes of several
statements run in one transaction, and lock the rows they read first (``FOR UPDATE``). Jobs
are taken with ``FOR UPDATE SKIP LOCKED``, so any number of processes can take jobs without
taking one twice.

Keyword search gives SQLite's answers without FTS5: the text is cut into tokens here as FTS5's
unicode61 cuts it (``_words.tokens``), each token stemmed by PostgreSQL's English Snowball
stemmer (stop words kept, as FTS5 keeps them), and stored as a ``tsvector`` of stems at their
positions with a GIN index that finds the rows holding a query's phrases. BM25, snippets and
coverage are computed from those positions, as FTS5 computes them (``_pg_words.py``). Stems
can differ from FTS5's Porter stemmer on a few words (Snowball is Porter's successor).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

import vifusion.catalog._pg_words as pg_words
from vifusion.catalog._catalog import Catalog
from vifusion.catalog._database import Dialect, QmarkConnection, Row
from vifusion.catalog._pg_words import Phrase
from vifusion.catalog._records import CatalogUnreachable, NoCatalog
from vifusion.catalog._schema import migrate_postgres
from vifusion.catalog._texts import TEXT_COLUMNS, Query
from vifusion.catalog._words import FUZZY_WEIGHT, SNIPPET_TOKENS, marked, phrase_starts, with_near

# A text row's columns with its lengths in the keyword index (``pg_words.with_stems``).
_STEMMED = f"{TEXT_COLUMNS}, n_tokens, n_english"


class PostgresCatalog(Catalog):
    """The catalog in a PostgreSQL database. Safe to share between threads and processes."""

    dialect = Dialect(
        seq="seq",
        lock=" FOR UPDATE",
        take=" FOR UPDATE SKIP LOCKED",
        position="strpos",
        matching="SELECT id FROM texts WHERE tsv @@ ?::tsquery",
    )

    def __init__(self, url: str, pool_size: int = 8, read_only: bool = False) -> None:
        """``read_only``: nothing is created or migrated, and the connections refuse writes.
        Fails at once (CatalogUnreachable) where the server cannot be reached; NoCatalog
        where a reader finds no catalog there."""
        import psycopg
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        super().__init__(read_only)
        info = psycopg.conninfo.conninfo_to_dict(url)
        self.url = url
        self.where = (
            f"postgresql://{info.get('user', '')}@{info.get('host', '')}:{info.get('port', 5432)}"
            f"/{info.get('dbname', '')}"
        )  # the URL without its password, for messages
        self.path = None
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
                raise NoCatalog(f"no catalog at {self.where}")
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

    @contextlib.contextmanager
    def _connection(self) -> Iterator[QmarkConnection]:
        with self._pool.connection() as c:
            yield QmarkConnection(c)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[QmarkConnection]:
        with self._pool.connection() as c, c.transaction():
            yield QmarkConnection(c)

    def close(self) -> None:
        self._pool.close()

    def _any_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{column} = ANY(?)", [list(values)]

    def _metadata_is(self, key: str, value: Any) -> tuple[str, list[Any]]:
        # jsonb equality tells 1 from "1" and from true, and a missing key from a null.
        return "(metadata::jsonb -> ?) = ?::jsonb", [key, json.dumps(value)]

    # -- keyword search over stems -----------------------------------------------------

    def _insert_texts(self, c: QmarkConnection, rows: list[tuple]) -> None:
        # ``words`` (the last) is SQLite's: here the tsvector holds the words.
        c.executemany(
            f"INSERT INTO texts ({TEXT_COLUMNS}, tsv, n_tokens, n_english)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?::tsvector, ?, ?)",
            [
                (*row[:-1], *entry)
                for row, entry in zip(rows, pg_words.entries(c, rows), strict=True)
            ],
        )

    def _phrases(self, c: QmarkConnection, words: list[str]) -> dict[str, Phrase]:
        return pg_words.phrases(c, words)

    def _term(self, term: str) -> Phrase:
        return (term,)

    def _match(self, phrases: Sequence[Phrase]) -> str | None:
        return pg_words.tsquery(phrases)

    def _vocabulary(self, c: QmarkConnection) -> str:
        return "SELECT word AS term, ndoc FROM ts_stat('SELECT tsv FROM texts')"

    def _rank(
        self, c: QmarkConnection, q: Query, where: str, args: list, limit: int
    ) -> dict[int, float]:
        stats = c.execute(
            "SELECT count(*) AS n, coalesce(sum(n_tokens"
            f"{' + n_english' if self._has(c, 'n_english') else ''}), 0) AS length FROM texts"
        ).fetchone()
        stemmed = self._columns(c, _STEMMED)
        total, mean = stats["n"], (stats["length"] / stats["n"] if stats["n"] else 0.0)
        return with_near(
            pg_words.bm25_scores(c, stemmed, q.exact, where, args, limit, total, mean),
            pg_words.bm25_scores(c, stemmed, q.spelt, where, args, limit, total, mean),
        )

    def _hits(
        self, c: QmarkConnection, ids: list[int], q: Query, marks: tuple[str, str]
    ) -> dict[int, tuple[Row, str, str | None, float]]:
        out = {}
        for i, (r, seq, english) in pg_words.with_stems(c, self._columns(c, _STEMMED), ids).items():
            held = 0.0  # the share of the words it holds (in its text or its English)
            for w in q.words:
                if phrase_starts(seq, q.phrases[w]) or phrase_starts(english, q.phrases[w]):
                    held += 1.0
                elif any(phrase_starts(s, p) for p in q.near.get(w, ()) for s in (seq, english)):
                    held += FUZZY_WEIGHT
            phrases = q.exact + q.spelt
            snippet = marked(r["text"], pg_words.spans(seq, phrases), marks, SNIPPET_TOKENS)
            snippet_english = r["english"] and marked(
                r["english"], pg_words.spans(english, phrases), marks, SNIPPET_TOKENS
            )
            out[i] = (r, snippet, snippet_english or None, held / len(q.words))
        return out

    def _texts_columns(self, c: QmarkConnection) -> set[str]:
        rows = c.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = 'texts' AND table_schema = current_schema()"
        )
        return {r["column_name"] for r in rows}

    def _rows_at(self, c: QmarkConnection, keys: list[tuple[int, str, int]]) -> dict[int, Row]:
        rows = c.execute(
            f"SELECT t.id, {self._columns(c, TEXT_COLUMNS)} FROM texts t"
            " JOIN unnest(?::bigint[], ?::text[], ?::int[]) AS k(v, kind, n)"
            " ON t.video_id = k.v AND t.kind = k.kind AND t.n = k.n",
            ([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]),
        ).fetchall()
        return {r["id"]: r for r in rows}

    def _highlights(
        self, c: QmarkConnection, found: dict[int, Row], q: Query, marks: tuple[str, str]
    ) -> dict[int, tuple[str | None, str | None]]:
        phrases = q.exact + q.spelt
        out = {}
        for i, (r, seq, english) in pg_words.with_stems(
            c, self._columns(c, _STEMMED), list(found)
        ).items():
            text, in_english = pg_words.spans(seq, phrases), pg_words.spans(english, phrases)
            if text or in_english:  # as FTS5 finds the rows holding any
                out[i] = (
                    marked(r["text"], text, marks) if text else None,
                    marked(r["english"], in_english, marks) if in_english else None,
                )
        return out
