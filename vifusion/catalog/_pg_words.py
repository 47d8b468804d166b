"""Keyword search's PostgreSQL side: English Snowball stems of FTS5-cut tokens, stored as a
``tsvector`` of stems at their positions (a row's text at 1..n_tokens, its English rendering
after a gap, at n_tokens + 2.., as FTS5 keeps two columns); tsqueries of phrases; BM25 and
matched spans computed from those positions as FTS5 computes them (``_postgres.py``). Statements are
written with ``?`` for each parameter, as all the catalog's are (``_database.QmarkConnection``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from vifusion.catalog._words import bm25, phrase_starts, tokens

MAX_LEXEME_BYTES = (
    2046  # PostgreSQL's limit on a tsvector word: a longer token is stored unsearchable
)
Phrase = tuple[str, ...]  # a query word as stems in order; () where it can match nothing


def stems_of(c: Any, toks: Iterable[str]) -> dict[str, str]:
    """Each token's stem: English Snowball's, or the token itself where the stemmer drops it
    (a stop word: FTS5 keeps those, and so does this index)."""
    toks = [t for t in toks if len(t.encode()) <= MAX_LEXEME_BYTES]
    if not toks:
        return {}
    rows = c.execute(
        "SELECT t, coalesce((ts_lexize('english_stem', t))[1], t) AS stem FROM unnest(?::text[]) AS t",
        (toks,),
    ).fetchall()
    return {r["t"]: r["stem"] for r in rows}


def quote(stem: str) -> str:
    """A stem as a tsvector / tsquery literal word: quoted, never syntax."""
    return "'" + stem.replace("\\", "\\\\").replace("'", "''") + "'"


def tsvector(toks: list[str], english: list[str], stems: dict[str, str]) -> str:
    """A row's index entry: each token's stem at its position (1-based), those of its English
    rendering from ``len(toks) + 2`` (a gap: no phrase spans the two), as a tsvector literal.
    A token too long to index is left out; the positions after it stay where they are."""
    at: dict[str, list[str]] = {}
    placed = [*enumerate(toks, start=1), *enumerate(english, start=len(toks) + 2)]
    for i, tok in placed:
        if tok in stems:
            at.setdefault(stems[tok], []).append(str(i))
    return " ".join(f"{quote(stem)}:{','.join(pos)}" for stem, pos in at.items())


def entries(c: Any, rows: Sequence[Any]) -> list[tuple[str, int, int]]:
    """Each row's (tsvector, n_tokens, n_english), from its ``text`` and ``english`` (a
    mapping or a ``checked_rows`` tuple)."""
    cut = [
        (
            [t for _, _, t in tokens(r["text"] if isinstance(r, dict) else r[5])],
            [t for _, _, t in tokens((r["english"] if isinstance(r, dict) else r[7]) or "")],
        )
        for r in rows
    ]
    stems = stems_of(c, {t for text, english in cut for t in (*text, *english)})
    return [(tsvector(text, english, stems), len(text), len(english)) for text, english in cut]


def phrases(c: Any, words: list[str]) -> dict[str, Phrase]:
    """Each query word as the stems of its tokens, in order (FTS5 reads a word with
    punctuation inside, ``AC/DC``, as the phrase "ac dc"); () for a word that can match nothing."""
    cut = {w: [tok for _, _, tok in tokens(w)] for w in words}
    stems = stems_of(c, {tok for toks in cut.values() for tok in toks})
    return {
        w: tuple(stems[t] for t in toks) if toks and all(t in stems for t in toks) else ()
        for w, toks in cut.items()
    }


def tsquery(phrases: Sequence[Phrase]) -> str | None:
    """A tsquery finding rows holding any of ``phrases`` (None: none can match)."""
    parts = ["(" + " <-> ".join(map(quote, p)) + ")" for p in phrases if p]
    return " | ".join(parts) or None


def bm25_scores(
    c: Any,
    columns: str,
    phrases: list[Phrase],
    where: str,
    args: list[Any],
    limit: int,
    total: int,
    mean: float,
) -> dict[int, float]:
    """Text row id -> BM25 score of the ``limit`` best rows (by score, then video, time, n)
    among those ``where`` admits holding any of ``phrases``; each phrase's row count is over
    the whole index, as FTS5 counts it, and its count in a row and the row's length are over
    its text and English rendering together, as FTS5 counts its columns."""
    if (q := tsquery(phrases)) is None:
        return {}
    counts = c.execute(
        "SELECT "
        + ", ".join(
            f"count(*) FILTER (WHERE tsv @@ ?::tsquery) AS c{i}" for i in range(len(phrases))
        )
        + " FROM texts WHERE tsv @@ ?::tsquery",
        [tsquery([p]) or "''" for p in phrases] + [q],
    ).fetchone()
    df = [counts[f"c{i}"] for i in range(len(phrases))]
    ids = [
        r["id"]
        for r in c.execute(
            f"SELECT t.id FROM texts t WHERE t.tsv @@ ?::tsquery AND {where}", [q, *args]
        ).fetchall()
    ]
    scored = []
    for i, (r, seq, english) in with_stems(c, columns, ids).items():
        tf = [len(phrase_starts(seq, p)) + len(phrase_starts(english, p)) for p in phrases]
        length = r["n_tokens"] + r["n_english"]
        scored.append((-bm25(tf, df, total, length, mean), r["video_id"], r["start_s"], r["n"], i))
    return {i: -s for s, _, _, _, i in sorted(scored)[:limit]}


Stems = list[frozenset[str]]  # a text's tokens' stems, in order


def with_stems(
    c: Any, columns: str, ids: list[int]
) -> dict[int, tuple[dict[str, Any], Stems, Stems]]:
    """Text rows by id (``columns`` of ``texts t``, with n_tokens and n_english), each with
    its tokens' stems in order and its English rendering's (from its index entry)."""
    if not ids:
        return {}
    rows = {
        r["id"]: r
        for r in c.execute(f"SELECT t.id, {columns} FROM texts t WHERE t.id = ANY(?)", (ids,))
    }
    seqs = {i: [set() for _ in range(r["n_tokens"] + 1 + r["n_english"])] for i, r in rows.items()}
    for r in c.execute(
        "SELECT t.id, u.lexeme, u.positions FROM texts t, unnest(t.tsv) AS u WHERE t.id = ANY(?)",
        (ids,),
    ):
        seq = seqs[r["id"]]
        for p in r["positions"]:
            if p <= len(seq):
                seq[p - 1].add(r["lexeme"])
    out = {}
    for i, r in rows.items():
        stems = [frozenset(s) for s in seqs[i]]
        out[i] = (r, stems[: r["n_tokens"]], stems[r["n_tokens"] + 1 :])
    return out


def spans(seq: list[frozenset[str]], phrases: Sequence[Phrase]) -> list[tuple[int, int, int]]:
    """The token spans (first, past last, which phrase) where any of ``phrases`` occurs."""
    return [(i, i + len(p), k) for k, p in enumerate(phrases) if p for i in phrase_starts(seq, p)]
