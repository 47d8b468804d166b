"""The PostgreSQL catalog's speech and screen text: storing a video's rows, reading them back,
and keyword search over them with SQLite's answers (``_catalog_pg.py`` says how)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from vifusion.catalog import _pg_words as pg_words
from vifusion.catalog._records import TextRow
from vifusion.catalog._words import (
    FUZZY_WEIGHT,
    SNIPPET_TOKENS,
    TEXT_KINDS,
    check_kind,
    checked_rows,
    marked,
    phrase_starts,
    query_words,
    tokens,
)


class PostgresTexts:
    """The text methods of ``PostgresCatalog`` (which provides ``_pool``, its connection pool,
    and ``_rows``)."""

    _pool: Any

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        raise NotImplementedError

    def put_texts(self, video_id: int, kind: str, rows: Sequence[tuple[float, float, str]]) -> int:
        checked = checked_rows(video_id, kind, rows)
        cut = [[tok for _, _, tok in tokens(row[5])] for row in checked]
        with self._pool.connection() as c, c.transaction():
            stems = pg_words.stems_of(c, {tok for toks in cut for tok in toks})
            c.execute("DELETE FROM texts WHERE video_id=%s AND kind=%s", (video_id, kind))
            with c.cursor() as cur:
                cur.executemany(
                    "INSERT INTO texts (video_id, kind, n, start_s, end_s, text, tsv, n_tokens)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s::tsvector, %s)",
                    [
                        (*row, pg_words.tsvector(toks, stems), len(toks))
                        for row, toks in zip(checked, cut, strict=True)
                    ],
                )
        return len(checked)

    def texts(self, video_id: int, kind: str | None = None) -> list[TextRow]:
        sql, args = (
            "SELECT video_id, kind, n, start_s, end_s, text FROM texts WHERE video_id=%s",
            [video_id],
        )
        if kind is not None:
            check_kind(kind)
            sql += " AND kind=%s"
            args.append(kind)
        return [TextRow(**r) for r in self._rows(sql + " ORDER BY start_s, end_s, kind, n", args)]

    def keyword_search(
        self,
        query: str,
        kinds: Iterable[str] = TEXT_KINDS,
        video_ids: Iterable[int] | None = None,
        limit: int = 50,
        marks: tuple[str, str] = ("[", "]"),
        fuzzy: bool = True,
    ) -> list[TextRow]:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        kinds = list(kinds)
        for kind in kinds:
            check_kind(kind)
        words = query_words(query)
        if not words or not kinds:
            return []
        where, args = "t.kind = ANY(%s)", [kinds]
        if video_ids is not None:
            where += " AND t.video_id = ANY(%s)"
            args.append([int(v) for v in video_ids])
        with self._pool.connection() as c:
            phrases = pg_words.phrases(c, words)
            near = pg_words.near_spellings(c, words, phrases) if fuzzy else {}
            exact = [phrases[w] for w in words]
            spelt = [(t,) for terms in near.values() for t in terms]
            stats = c.execute(
                "SELECT count(*) AS n, coalesce(sum(n_tokens), 0) AS length FROM texts"
            ).fetchone()
            total, mean = stats["n"], (stats["length"] / stats["n"] if stats["n"] else 0.0)
            scores = pg_words.bm25_scores(c, exact, where, args, limit, total, mean)
            for i, score in pg_words.bm25_scores(c, spelt, where, args, limit, total, mean).items():
                scores[i] = scores.get(i, 0.0) + FUZZY_WEIGHT * score
            if not scores:
                return []
            found = pg_words.with_stems(c, list(scores))
        out = []
        for i, (r, seq) in found.items():
            held = 0.0
            for w in words:
                if phrase_starts(seq, phrases[w]):
                    held += 1.0
                elif any(phrase_starts(seq, (t,)) for t in near.get(w, ())):
                    held += FUZZY_WEIGHT
            spans = pg_words.spans(seq, exact + spelt)
            out.append(
                TextRow(
                    r["video_id"],
                    r["kind"],
                    r["n"],
                    r["start_s"],
                    r["end_s"],
                    r["text"],
                    scores[i],
                    marked(r["text"], spans, marks, SNIPPET_TOKENS),
                    held / len(words),
                )
            )
        out.sort(key=lambda r: (-r.score, r.video_id, r.start_s, r.n))
        return out[:limit]

    def texts_at(
        self,
        keys: Iterable[tuple[int, str, int]],
        query: str | None = None,
        marks: tuple[str, str] = ("[", "]"),
    ) -> dict[tuple[int, str, int], TextRow]:
        keys = list(dict.fromkeys((int(v), k, int(n)) for v, k, n in keys))
        if not keys:
            return {}
        with self._pool.connection() as c:
            ids = [
                r["id"]
                for r in c.execute(
                    "SELECT t.id FROM texts t JOIN unnest(%s::bigint[], %s::text[], %s::int[]) AS k(v, kind, n)"
                    " ON t.video_id = k.v AND t.kind = k.kind AND t.n = k.n",
                    ([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]),
                ).fetchall()
            ]
            found = pg_words.with_stems(c, ids)
            words = query_words(query) if query is not None else []
            phrases: list[pg_words.Phrase] = []
            if words and found:
                by_word = pg_words.phrases(c, words)
                near = pg_words.near_spellings(c, words, by_word)
                phrases = [by_word[w] for w in words] + [(t,) for ts in near.values() for t in ts]
        out = {}
        for r, seq in found.values():
            row = TextRow(r["video_id"], r["kind"], r["n"], r["start_s"], r["end_s"], r["text"])
            if query is not None:
                row = replace(row, snippet=marked(row.text, pg_words.spans(seq, phrases), marks))
            out[(row.video_id, row.kind, row.n)] = row
        return out
