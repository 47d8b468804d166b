"""The catalog's speech and screen text, whichever database holds it: storing a video's rows,
reading them back, and keyword search over them (BM25, near spellings of words no row holds).

What is written once is here; what a database does its own way (FTS5 on SQLite, a tsvector
of stems on PostgreSQL) are the hooks at the end, in ``_sqlite.py`` and ``_postgres.py``. A
``Phrase`` is a query word as a database matches it: the word itself for FTS5, which cuts
and stems it; the stems of its tokens, in order, for PostgreSQL.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from vifusion.catalog._database import Database, Row
from vifusion.catalog._records import TextRow
from vifusion.catalog._words import (
    MAX_FUZZY_WORDS,
    TEXT_KINDS,
    check_kind,
    checked_rows,
    fuzzy_key,
    letter_pairs,
    nearest,
    query_words,
)

Phrase = Any  # str on SQLite, tuple[str, ...] on PostgreSQL
# A text row's columns as TextRow takes them (its ``id`` besides, for the keyword index).
TEXT_COLUMNS = "video_id, kind, n, start_s, end_s, text, language, english"
# Columns added since the first release, and what they read as in a catalog from before them
# (a reader does not migrate: ``read_only`` leaves the catalog as it found it).
ADDED_COLUMNS = {"language": "NULL", "english": "NULL", "words": "''", "n_english": "0"}


@dataclass(frozen=True)
class Query:
    """A keyword query as a database matches it: its words, each word's phrase, and the
    near spellings (as phrases) of the words no row holds."""

    words: list[str]
    phrases: dict[str, Phrase]
    near: dict[str, list[Phrase]]

    @property
    def exact(self) -> list[Phrase]:
        return [self.phrases[w] for w in self.words]

    @property
    def spelt(self) -> list[Phrase]:
        return [p for ps in self.near.values() for p in ps]


class Texts(Database):
    """The text methods of ``Catalog``."""

    def put_texts(self, video_id: int, kind: str, rows: Sequence[tuple]) -> int:
        """Replace all of a video's ``kind`` rows ("speech" or "screen") with ``rows``, each
        (start_s, end_s, text[, language[, english]]), in one transaction: indexing a video again leaves exactly
        its last run's rows. Row i is ``n = i``, the number its vector carries
        (``FusedBatch.of_texts(video_id, kind, 0, ...)`` over the same rows, in order).
        Returns the rows stored."""
        checked = checked_rows(video_id, kind, rows)
        with self._transaction() as c:
            c.execute("DELETE FROM texts WHERE video_id=? AND kind=?", (video_id, kind))
            self._insert_texts(c, checked)
        return len(checked)

    def texts(self, video_id: int, kind: str | None = None) -> list[TextRow]:
        """A video's text rows (one kind, or both), in time order: a transcript."""
        with self._connection() as c:
            sql = f"SELECT {self._columns(c, TEXT_COLUMNS)} FROM texts t WHERE video_id=?"
        args: list[Any] = [video_id]
        if kind is not None:
            check_kind(kind)
            sql += " AND kind=?"
            args.append(kind)
        return [TextRow(**r) for r in self._rows(sql + " ORDER BY start_s, end_s, kind, n", args)]

    def _columns(self, c: Any, columns: str) -> str:
        """``columns`` of ``texts t`` as a SELECT list; those this catalog lacks (one from
        before them, opened to read) as ``ADDED_COLUMNS`` reads them."""
        return ", ".join(
            f"t.{k}" if self._has(c, k) else f"{ADDED_COLUMNS[k]} AS {k}"
            for k in columns.split(", ")
        )

    def _has(self, c: Any, column: str) -> bool:
        """Whether ``texts`` has ``column`` (read once: a catalog open to write was migrated)."""
        if getattr(self, "_texts_has", None) is None:
            self._texts_has = self._texts_columns(c)
        return column in self._texts_has

    def keyword_search(
        self,
        query: str,
        kinds: Iterable[str] = TEXT_KINDS,
        video_ids: Iterable[int] | None = None,
        limit: int = 50,
        marks: tuple[str, str] = ("[", "]"),
        fuzzy: bool = True,
        spoken_in: str | None = None,
    ) -> list[TextRow]:
        """Text rows holding any of the query's words (stemmed), best BM25 first, at most
        ``limit``; only ``kinds``, only ``video_ids`` when given, and only rows of videos
        whose language (the one spoken first) is ``spoken_in`` when given. Each carries its BM25
        score, a snippet with the matched words between ``marks``, and its ``coverage``.
        With ``fuzzy``, a word no row holds is looked for by its near spellings
        (``max_edits``: a speech model spells an unknown name as it hears it), a near match
        counting ``FUZZY_WEIGHT`` of an exact one. Any string is a safe query: each
        whitespace-separated part is one phrase, never syntax."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        kinds = list(kinds)
        for kind in kinds:
            check_kind(kind)
        words = query_words(query)
        if not words or not kinds:
            return []
        where, args = self._any_of("t.kind", kinds)
        if video_ids is not None:
            clause, more = self._any_of("t.video_id", [int(v) for v in video_ids])
            where, args = f"{where} AND {clause}", args + more
        if spoken_in is not None:
            where += " AND t.video_id IN (SELECT id FROM videos WHERE language = ?)"
            args = [*args, spoken_in]
        with self._connection() as c:
            q = self._query(c, words, fuzzy)
            scores = self._rank(c, q, where, args, limit)
            if not scores:
                return []
            hits = self._hits(c, list(scores), q, marks)
        out = [
            replace(
                _text_row(r),
                score=scores[i],
                snippet=snippet,
                snippet_english=snippet_english,
                coverage=coverage,
            )
            for i, (r, snippet, snippet_english, coverage) in hits.items()
        ]
        out.sort(key=lambda r: (-r.score, r.video_id, r.start_s, r.n))
        return out[:limit]

    def texts_at(
        self,
        keys: Iterable[tuple[int, str, int]],
        query: str | None = None,
        marks: tuple[str, str] = ("[", "]"),
    ) -> dict[tuple[int, str, int], TextRow]:
        """The text rows named by (video_id, kind, n) keys (those that exist), e.g. a dense
        search's hits; with ``query``, each one's ``snippet`` is its whole text with the
        query's words (as ``keyword_search`` reads them, near spellings included) between
        ``marks``, or the plain text where none occurs in it (``snippet_english`` the same of
        its English rendering)."""
        keys = list(dict.fromkeys((int(v), k, int(n)) for v, k, n in keys))
        if not keys:
            return {}
        marked: dict[int, tuple[str | None, str | None]] = {}
        with self._connection() as c:
            found = self._rows_at(c, keys)
            words = query_words(query) if query is not None else []
            if words and found:
                marked = self._highlights(c, found, self._query(c, words), marks)
        out = {}
        for i, r in found.items():
            row = _text_row(r)
            if query is not None:
                text, english = marked.get(i, (None, None))
                row = replace(row, snippet=text or row.text, snippet_english=english or row.english)
            out[(row.video_id, row.kind, row.n)] = row
        return out

    def _query(self, c: Any, words: list[str], fuzzy: bool = True) -> Query:
        """``words`` as this database matches them, with near spellings where ``fuzzy``."""
        phrases = self._phrases(c, words)
        near = self._near_spellings(c, words, phrases) if fuzzy else {}
        return Query(words, phrases, {w: list(map(self._term, ts)) for w, ts in near.items()})

    def _near_spellings(
        self, c: Any, words: list[str], phrases: dict[str, Phrase]
    ) -> dict[str, list[str]]:
        """For each of ``words`` that no row holds and that is letters only (at most
        ``MAX_FUZZY_WORDS`` such words): the index's words (as stemmed there) nearest to it,
        within ``max_edits``, the most common first (``nearest``).

        A cheap filter runs in SQL first: a word within d edits keeps at least all but 2d of
        the other's distinct letter pairs (an edit breaks at most two), so only index words
        holding that many are measured."""
        out: dict[str, list[str]] = {}
        tried = 0
        for w in words:
            if (
                (fuzzy := fuzzy_key(w)) is None
                or tried == MAX_FUZZY_WORDS
                or self._holds(c, w, phrases)
            ):
                continue
            key, d = fuzzy
            tried += 1
            pairs = letter_pairs(key)
            sql = f"SELECT term, ndoc FROM ({self._vocabulary(c)}) v WHERE length(term) BETWEEN ? AND ?"
            args: list[Any] = [len(key) - d, len(key) + d]
            if len(pairs) > 2 * d:
                holds = f"(CASE WHEN {self.dialect.position}(term, ?) > 0 THEN 1 ELSE 0 END)"
                sql += f" AND ({' + '.join([holds] * len(pairs))}) >= ?"
                args += [*pairs, len(pairs) - 2 * d]
            vocabulary = [(r["term"], r["ndoc"]) for r in c.execute(sql, args).fetchall()]
            if found := nearest(key, d, vocabulary):
                out[w] = found
        return out

    def _holds(self, c: Any, word: str, phrases: dict[str, Phrase]) -> bool:
        """Whether any text row holds ``word``."""
        match = self._match([phrases[word]])
        return match is not None and bool(
            c.execute(f"{self.dialect.matching} LIMIT 1", (match,)).fetchall()
        )

    # -- what each database provides ------------------------------------------------

    @abstractmethod
    def _texts_columns(self, c: Any) -> set[str]:
        """The columns the ``texts`` table has."""

    @abstractmethod
    def _insert_texts(self, c: Any, rows: list[tuple]) -> None:
        """Store ``put_texts``'s checked rows (video_id, kind, n, start_s, end_s, text,
        language, english, words), each in the keyword index."""

    @abstractmethod
    def _phrases(self, c: Any, words: list[str]) -> dict[str, Phrase]:
        """Each query word as a phrase."""

    @abstractmethod
    def _term(self, term: str) -> Phrase:
        """An index word (a near spelling) as a phrase."""

    @abstractmethod
    def _match(self, phrases: Sequence[Phrase]) -> str | None:
        """The argument of ``dialect.matching`` finding rows holding any of ``phrases``
        (None: none can match)."""

    @abstractmethod
    def _vocabulary(self, c: Any) -> str:
        """A SELECT of the index's words (``term``) and the rows holding each (``ndoc``)."""

    @abstractmethod
    def _rank(self, c: Any, q: Query, where: str, args: list, limit: int) -> dict[int, float]:
        """Text row id -> score of the ``limit`` best rows ``where`` admits: BM25 of the
        exact phrases plus ``FUZZY_WEIGHT`` of that of the near spellings (``with_near``)."""

    @abstractmethod
    def _hits(
        self, c: Any, ids: list[int], q: Query, marks: tuple[str, str]
    ) -> dict[int, tuple[Row, str, str | None, float]]:
        """The text rows ``ids`` (``TEXT_COLUMNS``), each with its snippet, that of its English
        rendering (None: it has none) and its coverage of the words (in either)."""

    @abstractmethod
    def _rows_at(self, c: Any, keys: list[tuple[int, str, int]]) -> dict[int, Row]:
        """The text rows named by (video_id, kind, n) keys (``TEXT_COLUMNS``), by id."""

    @abstractmethod
    def _highlights(
        self, c: Any, found: dict[int, Row], q: Query, marks: tuple[str, str]
    ) -> dict[int, tuple[str | None, str | None]]:
        """The texts of ``found`` and their English renderings with the query's phrases
        between ``marks``, by id (None for one holding none; rows holding none left out)."""


def _text_row(r: Row) -> TextRow:
    return TextRow(**{k: r[k] for k in TEXT_COLUMNS.split(", ")})
