"""The catalog's speech and screen text on SQLite: storing a video's rows, reading them back,
and keyword search over them (FTS5, BM25, near spellings of words no row holds)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from vifusion.catalog._records import TextRow
from vifusion.catalog._words import (
    FUZZY_WEIGHT,
    MAX_FUZZY_WORDS,
    SNIPPET_TOKENS,
    TEXT_KINDS,
    check_kind,
    checked_rows,
    fuzzy_key,
    letter_pairs,
    nearest,
    query_words,
)


class SqliteTexts:
    """The text methods of ``Catalog`` (which provides ``_conn``, this thread's connection)."""

    def _conn(self) -> sqlite3.Connection:
        raise NotImplementedError

    def put_texts(self, video_id: int, kind: str, rows: Sequence[tuple[float, float, str]]) -> int:
        """Replace all of a video's ``kind`` rows ("speech" or "screen") with ``rows``, each
        (start_s, end_s, text), in one transaction: indexing a video again leaves exactly
        its last run's rows. Row i is ``n = i``, the number its vector carries
        (``FusedBatch.of_texts(video_id, kind, 0, ...)`` over the same rows, in order).
        Returns the rows stored."""
        checked = checked_rows(video_id, kind, rows)
        with self._conn() as c:
            c.execute("DELETE FROM texts WHERE video_id=? AND kind=?", (video_id, kind))
            c.executemany(
                "INSERT INTO texts (video_id, kind, n, start_s, end_s, text) VALUES (?, ?, ?, ?, ?, ?)",
                checked,
            )
        return len(checked)

    def texts(self, video_id: int, kind: str | None = None) -> list[TextRow]:
        """A video's text rows (one kind, or both), in time order: a transcript."""
        sql, args = (
            "SELECT video_id, kind, n, start_s, end_s, text FROM texts WHERE video_id=?",
            [video_id],
        )
        if kind is not None:
            check_kind(kind)
            sql += " AND kind=?"
            args.append(kind)
        rows = self._conn().execute(sql + " ORDER BY start_s, end_s, kind, n", args).fetchall()
        return [TextRow(**dict(r)) for r in rows]

    def keyword_search(
        self,
        query: str,
        kinds: Iterable[str] = TEXT_KINDS,
        video_ids: Iterable[int] | None = None,
        limit: int = 50,
        marks: tuple[str, str] = ("[", "]"),
        fuzzy: bool = True,
    ) -> list[TextRow]:
        """Text rows holding any of the query's words (stemmed), best BM25 first, at most
        ``limit``; only ``kinds``, and only ``video_ids`` when given. Each carries its BM25
        score, a snippet with the matched words between ``marks``, and its ``coverage``.
        With ``fuzzy``, a word no row holds is looked for by its near spellings
        (``max_edits``: a speech model spells an unknown name as it hears it), a near match
        counting ``FUZZY_WEIGHT`` of an exact one. Any string is a safe query: each
        whitespace-separated part is one quoted FTS5 phrase, never syntax."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        kinds = list(kinds)
        for kind in kinds:
            check_kind(kind)
        words = query_words(query)
        if not words or not kinds:
            return []
        where, args = f"t.kind IN ({','.join('?' * len(kinds))})", list(kinds)
        if video_ids is not None:
            where += " AND t.video_id IN (SELECT value FROM json_each(?))"
            args.append(json.dumps([int(v) for v in video_ids]))
        near = self._near_spellings(words) if fuzzy else {}
        exact = [_phrase(w) for w in words]
        spelt = [_phrase(t) for terms in near.values() for t in terms]
        scores = self._bm25(" OR ".join(exact), where, args, limit)
        if spelt:
            for i, score in self._bm25(" OR ".join(spelt), where, args, limit).items():
                scores[i] = scores.get(i, 0.0) + FUZZY_WEIGHT * score
        if not scores:
            return []
        rows = (
            self._conn()
            .execute(
                "SELECT t.id, t.video_id, t.kind, t.n, t.start_s, t.end_s, t.text,"
                f" snippet(texts_fts, 0, ?, ?, '…', {SNIPPET_TOKENS}) AS snippet"
                " FROM texts_fts JOIN texts t ON t.id = texts_fts.rowid"
                " WHERE texts_fts MATCH ? AND t.id IN (SELECT value FROM json_each(?))",
                (marks[0], marks[1], " OR ".join(exact + spelt), json.dumps(list(scores))),
            )
            .fetchall()
        )
        coverage = self._coverage(words, near, [r["id"] for r in rows])
        out = [
            TextRow(
                r["video_id"],
                r["kind"],
                r["n"],
                r["start_s"],
                r["end_s"],
                r["text"],
                scores[r["id"]],
                r["snippet"],
                coverage[r["id"]],
            )
            for r in rows
        ]
        out.sort(key=lambda r: (-r.score, r.video_id, r.start_s, r.n))
        return out[:limit]

    def _bm25(self, match: str, where: str, args: list[Any], limit: int) -> dict[int, float]:
        """Text row id -> BM25 score (higher = better) of the ``limit`` best rows for ``match``."""
        sql = (
            "SELECT t.id, -bm25(texts_fts) FROM texts_fts JOIN texts t ON t.id = texts_fts.rowid"
            f" WHERE texts_fts MATCH ? AND {where} ORDER BY bm25(texts_fts), t.video_id, t.start_s, t.n LIMIT ?"
        )
        return dict(self._conn().execute(sql, [match, *args, int(limit)]).fetchall())

    def _holding(self, match: str, ids: list[int]) -> set[int]:
        """The text rows among ``ids`` that ``match`` finds."""
        return {
            r[0]
            for r in self._conn().execute(
                "SELECT rowid FROM texts_fts WHERE texts_fts MATCH ? AND rowid IN (SELECT value FROM json_each(?))",
                (match, json.dumps(ids)),
            )
        }

    def _coverage(
        self, words: list[str], near: dict[str, list[str]], ids: list[int]
    ) -> dict[int, float]:
        """Per text row: the share of ``words`` it holds, a near spelling counting FUZZY_WEIGHT."""
        held = dict.fromkeys(ids, 0.0)
        for w in words:
            exact = self._holding(_phrase(w), ids)
            spelt = (
                self._holding(" OR ".join(map(_phrase, near[w])), ids) - exact
                if near.get(w)
                else set()
            )
            for i in exact:
                held[i] += 1.0
            for i in spelt:
                held[i] += FUZZY_WEIGHT
        return {i: h / len(words) for i, h in held.items()}

    def _near_spellings(self, words: list[str]) -> dict[str, list[str]]:
        """For each of ``words`` that no row holds and that is letters only (at most
        ``MAX_FUZZY_WORDS`` such words): the index's words (as stemmed there) nearest to it,
        within ``max_edits``, the most common first. Only the nearest: a word one edit away
        is the likelier reading, and the farther ones would mostly be other words.

        A cheap filter runs in SQL first: a word within d edits keeps at least all but 2d of
        the other's distinct letter pairs (an edit breaks at most two), so only index words
        holding that many are measured."""
        c = self._conn()
        c.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.texts_vocab USING fts5vocab(main, texts_fts, row)"
        )
        out: dict[str, list[str]] = {}
        tried = 0
        for w in words:
            if (
                (fuzzy := fuzzy_key(w)) is None
                or tried == MAX_FUZZY_WORDS
                or c.execute(
                    "SELECT 1 FROM texts_fts WHERE texts_fts MATCH ? LIMIT 1", (_phrase(w),)
                ).fetchone()
            ):
                continue
            key, d = fuzzy
            tried += 1
            pairs = letter_pairs(key)
            sql = "SELECT term, doc FROM temp.texts_vocab WHERE length(term) BETWEEN ? AND ?"
            args: list[Any] = [len(key) - d, len(key) + d]
            if len(pairs) > 2 * d:
                sql += " AND (" + " + ".join(["(instr(term, ?) > 0)"] * len(pairs)) + ") >= ?"
                args += [*pairs, len(pairs) - 2 * d]
            if found := nearest(key, d, c.execute(sql, args).fetchall()):
                out[w] = found
        return out

    def texts_at(
        self,
        keys: Iterable[tuple[int, str, int]],
        query: str | None = None,
        marks: tuple[str, str] = ("[", "]"),
    ) -> dict[tuple[int, str, int], TextRow]:
        """The text rows named by (video_id, kind, n) keys (those that exist), e.g. a dense
        search's hits; with ``query``, each one's ``snippet`` is its whole text with the
        query's words (as ``keyword_search`` reads them, near spellings included) between
        ``marks``, or the plain text where none occurs in it."""
        keys = list(dict.fromkeys((int(v), k, int(n)) for v, k, n in keys))
        if not keys:
            return {}
        sql = (
            "SELECT t.id, t.video_id, t.kind, t.n, t.start_s, t.end_s, t.text FROM texts t"
            " JOIN json_each(?) j ON t.video_id = json_extract(j.value, '$[0]')"
            " AND t.kind = json_extract(j.value, '$[1]') AND t.n = json_extract(j.value, '$[2]')"
        )
        c = self._conn()
        found = {r["id"]: r for r in c.execute(sql, (json.dumps(keys),))}
        marked: dict[int, str] = {}
        words = query_words(query) if query is not None else []
        if words and found:
            near = self._near_spellings(words)
            match = " OR ".join(
                [_phrase(w) for w in words] + [_phrase(t) for ts in near.values() for t in ts]
            )
            marked = dict(
                c.execute(
                    "SELECT rowid, highlight(texts_fts, 0, ?, ?) FROM texts_fts"
                    " WHERE texts_fts MATCH ? AND rowid IN (SELECT value FROM json_each(?))",
                    (marks[0], marks[1], match, json.dumps(list(found))),
                ).fetchall()
            )
        out = {}
        for i, r in found.items():
            row = TextRow(r["video_id"], r["kind"], r["n"], r["start_s"], r["end_s"], r["text"])
            if query is not None:
                row = replace(row, snippet=marked.get(i, row.text))
            out[(row.video_id, row.kind, row.n)] = row
        return out


def _phrase(word: str) -> str:
    """``word`` as one quoted FTS5 phrase (a '"' doubled): never syntax."""
    return '"' + word.replace('"', '""') + '"'
