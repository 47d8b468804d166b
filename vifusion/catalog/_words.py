"""How the catalog reads words, whichever database holds it: a query's words, folding, the
edit distance of near spellings, the checks on text rows and metadata filters; and, for a
database without SQLite's FTS5 (PostgreSQL), the tokenizer, BM25 and the marking of matched
words that FTS5 does there, written to give the same answers."""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections.abc import Sequence
from typing import Any

TEXT_KINDS = ("speech", "screen")
_MAX_QUERY_TERMS = (
    32  # a keyword query's words past this are ignored (each costs a posting-list scan)
)
FUZZY_WEIGHT = 0.5  # a word matched by a near spelling counts this much of an exact match
MAX_EXPANSIONS = 8  # near spellings searched per unknown word, the nearest (then most common) first
# Near spellings are looked for only for words of up to MAX_FUZZY_CHARS letters, and for at most
# MAX_FUZZY_WORDS unknown words of a query: each costs a scan of the index's words.
MAX_FUZZY_CHARS, MAX_FUZZY_WORDS = 32, 4
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# Metadata keys usable in filters: plain names only, so they can go into a JSON path safely.
METADATA_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
SNIPPET_TOKENS = 16  # words in a keyword hit's snippet (FTS5's snippet() is asked for as many)
# FTS5's BM25 constants (k1, b), and the floor it puts under a word's weight when the word
# is in more than half the rows (its IDF would be negative).
_K1, _B, _MIN_IDF = 1.2, 0.75, 1e-6
# Scripts written without spaces between words (Han, Hiragana, Katakana, Thai, Lao, Khmer,
# Myanmar): each of their characters is a word of the index, and a query's run of them a
# phrase of characters, so any word is found wherever it is written, with no dictionary to
# ship and no segmenter's guess to agree with (a dictionary segmenter cuts "北京大学" as one
# word, and a query for "北京" would miss it).
_UNSPACED = (
    "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u31f0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
)
_BETWEEN_UNSPACED = re.compile(f"(?<=[{_UNSPACED}])(?=[{_UNSPACED}])")
# What the index reads between two such characters: a character FTS5's unicode61 takes as a
# separator (Cf, not a letter) that a reader never sees, so snippets drop it again.
SEPARATOR = "\u200b"
# A token is a run of letters and digits, as FTS5's unicode61 tokenizer cuts text (every other
# character separates), or one character of a script written without spaces; it is kept
# folded (``fold``).
_TOKEN = re.compile(f"(?=[{_UNSPACED}])[^\\W_]|(?:(?![{_UNSPACED}])[^\\W_])+")


def check_kind(kind: str) -> None:
    if kind not in TEXT_KINDS:
        raise ValueError(f"unknown text kind {kind!r}; expected one of {TEXT_KINDS}")


def checked_rows(video_id: int, kind: str, rows: Sequence[tuple]) -> list[tuple]:
    """``put_texts``'s rows, each (start_s, end_s, text[, language[, english]]), as stored:
    (video_id, kind, n, start_s, end_s, text, language, english, words); ValueError naming
    the first bad one (times that are not a span, a text that is not a str)."""
    check_kind(kind)
    checked = []
    for i, row in enumerate(rows):
        start, end, text, language, english = (*row, None, None)[:5]
        start, end = float(start), float(end)
        if not (math.isfinite(start) and math.isfinite(end) and 0 <= start <= end):
            raise ValueError(f"{kind} row {i}: times {start}..{end} are not a span")
        for name, value in (("text", text), ("language", language), ("english", english)):
            if not isinstance(value, str) and (name == "text" or value is not None):
                raise ValueError(
                    f"{kind} row {i}: {name} must be a str, got {type(value).__name__}"
                )
        # Control characters go: search marks matched words with two of them (search.MARKS).
        text = CONTROL.sub(" ", text)
        english = CONTROL.sub(" ", english) if english else None
        checked.append((video_id, kind, i, start, end, text, language, english, index_words(text)))
    return checked


def check_metadata_filter(key: str, value: Any) -> None:
    """A ``ready_ids`` filter's key and value, or ValueError saying what is wrong."""
    if not METADATA_KEY.fullmatch(key):  # match() would let a key end in a newline
        raise ValueError(f"metadata key {key!r}: use letters, digits, '_', '.', '-' (1-64)")
    if isinstance(value, (dict, list)):
        raise ValueError(f"metadata filter {key!r}: compare with a string, number or boolean")
    if isinstance(value, str) and "\x00" in value:  # PostgreSQL's jsonb cannot hold one
        raise ValueError(f"metadata filter {key!r}: contains a NUL character")
    if isinstance(value, int) and not -(2**63) <= value < 2**63:  # SQLite's integers are 64-bit
        raise ValueError(f"metadata filter {key!r}: the integer does not fit in 64 bits")
    if isinstance(value, float) and not math.isfinite(value):  # JSON has no NaN or infinity
        raise ValueError(f"metadata filter {key!r}: compare with a finite number")


def query_words(query: str) -> list[str]:
    """A user's query as keyword search reads it: its whitespace-separated parts that hold a
    letter or digit (control characters dropped: FTS5 ends a string at NUL), each once
    (ignoring case), at most ``_MAX_QUERY_TERMS``."""
    words: dict[str, str] = {}
    for part in str(query).split():
        part = "".join(ch for ch in part if ch.isprintable())
        if any(ch.isalnum() for ch in part):
            words.setdefault(part.casefold(), part)
        if len(words) == _MAX_QUERY_TERMS:
            break
    return list(words.values())


def index_words(text: str) -> str:
    """``text`` as the keyword index reads it: ``SEPARATOR`` between two characters of a
    script written without spaces, so that each is a word (a query's word is read the same
    way: a run of them is a phrase)."""
    return _BETWEEN_UNSPACED.sub(SEPARATOR, text)


def fold(word: str) -> str:
    """Lower case without diacritics, as the index's tokenizer (unicode61 with
    ``remove_diacritics 2``) keeps words: "Việt" as "viet", "mañana" as "manana"."""
    return "".join(
        ch for ch in unicodedata.normalize("NFKD", word.casefold()) if not unicodedata.combining(ch)
    )


def fuzzy_key(word: str) -> tuple[str, int] | None:
    """A query word as near spellings are looked for: (its folded letters, the edits
    allowed), or None where none are looked for (a short word, one with digits, a long one)."""
    key = fold(word.strip(string.punctuation))
    d = max_edits(key)
    if not d or not key.isalpha() or len(key) > MAX_FUZZY_CHARS or index_words(key) != key:
        return None
    return key, d


def letter_pairs(key: str) -> list[str]:
    """A word's distinct letter pairs. A word within d edits of it keeps at least all but 2d
    of them (an edit breaks at most two): a cheap filter before measuring the distance."""
    return sorted({key[i : i + 2] for i in range(len(key) - 1)})


def nearest(key: str, d: int, vocabulary: Sequence[tuple[str, int]]) -> list[str]:
    """The words of ``vocabulary`` (word, rows holding it) within ``d`` edits of ``key`` and
    nearest to it, the most common first, at most ``MAX_EXPANSIONS``. Only the nearest: a
    word one edit away is the likelier reading, and the farther ones would mostly be other words."""
    found = [(dist, -doc, term) for term, doc in vocabulary if (dist := edits(key, term, d)) <= d]
    if not found:
        return []
    closest = min(found)[0]
    return [term for dist, _, term in sorted(found)[:MAX_EXPANSIONS] if dist == closest]


def with_near(exact: dict[int, float], spelt: dict[int, float]) -> dict[int, float]:
    """Text row id -> score: its BM25 for the query's words plus ``FUZZY_WEIGHT`` of its BM25
    for their near spellings."""
    scores = dict(exact)
    for i, score in spelt.items():
        scores[i] = scores.get(i, 0.0) + FUZZY_WEIGHT * score
    return scores


def max_edits(word: str) -> int:
    """Edits allowed between an unknown query word and an index word: none under 4 letters
    (short words are all near each other), 1 up to 5, 2 at 6, 3 from 7 on. Generous for long
    words: a speech model writes a name it does not know as it hears it, and tiny.en wrote
    the spoken "Zorblax" as "Lorblax", "Norblax", "Boroblax" and "Morablex" (1 to 3 edits)."""
    n = len(word)
    return 0 if n < 4 else 1 if n < 6 else 2 if n < 7 else 3


def edits(a: str, b: str, limit: int) -> int:
    """The Levenshtein distance of ``a`` and ``b``, or ``limit + 1`` once it must exceed ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        cur = [i]
        for j, cb in enumerate(b, start=1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        if min(cur) > limit:
            return limit + 1
        prev = cur
    return min(prev[-1], limit + 1)


# -- FTS5's work, for PostgreSQL -------------------------------------------------------


def tokens(text: str) -> list[tuple[int, int, str]]:
    """``text``'s tokens as (start, end, folded token), in order: what FTS5's unicode61 reads."""
    return [(m.start(), m.end(), fold(m.group())) for m in _TOKEN.finditer(text)]


def phrase_starts(seq: Sequence[frozenset[str]], phrase: Sequence[str]) -> list[int]:
    """Where ``phrase`` (stems, in order) starts in ``seq`` (each token's stems)."""
    n = len(phrase)
    if not n:
        return []
    return [i for i in range(len(seq) - n + 1) if all(phrase[k] in seq[i + k] for k in range(n))]


def bm25(tf: Sequence[int], df: Sequence[int], rows: int, length: int, mean_length: float) -> float:
    """FTS5's BM25 of one row for a query of phrases: ``tf[i]`` the row's count of phrase i,
    ``df[i]`` the rows holding it, ``rows`` the rows in all, ``length`` the row's tokens and
    ``mean_length`` all rows' mean. Higher is better (FTS5's bm25() is this, negated)."""
    score = 0.0
    norm = _K1 * (1 - _B + _B * length / mean_length) if mean_length else _K1
    for f, n in zip(tf, df, strict=True):
        if f:
            idf = max(math.log((rows - n + 0.5) / (n + 0.5)), _MIN_IDF)
            score += idf * f * (_K1 + 1) / (f + norm)
    return score


def marked(
    text: str,
    spans: Sequence[tuple[int, int, int]],
    marks: tuple[str, str],
    window: int | None = None,
) -> str:
    """``text`` with the matched token ``spans`` (index of first, index past last, which
    phrase) between ``marks``, overlapping ones merged, as FTS5's highlight() marks them; with
    ``window``, cut to that many tokens where FTS5's snippet() cuts (``_snippet_start``),
    '…' where it was cut."""
    toks = tokens(text)
    first, last = 0, len(toks)
    if window is not None and len(toks) > window:
        first = _snippet_start(text, toks, sorted(spans), window)
        last = first + window
    merged: list[list[int]] = []
    for a, b, _ in sorted(spans):
        a, b = max(a, first), min(b, last)
        if a >= b:
            continue
        if merged and a < merged[-1][1]:  # overlapping (not merely adjacent) matches are one mark
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    begin = 0 if first == 0 else toks[first][0]
    end = len(text) if last == len(toks) else toks[last - 1][1]
    out, at = [], begin
    for a, b in merged:
        out += [text[at : toks[a][0]], marks[0], text[toks[a][0] : toks[b - 1][1]], marks[1]]
        at = toks[b - 1][1]
    out.append(text[at:end])
    return ("…" if begin else "") + "".join(out) + ("…" if end < len(text) else "")


def _snippet_start(
    text: str, toks: list[tuple[int, int, str]], spans: list[tuple[int, int, int]], window: int
) -> int:
    """The first token of FTS5's snippet: of the windows starting at each match (moved to
    centre the matches they hold) and at the start of the sentence before each match, the
    one scoring most, 1000 for each phrase it holds and 1 for each repeat, a sentence start
    scoring 100 more (120 the text's start). A sentence starts after '.' or ':' and a space."""
    n = len(toks)
    starts = [0] + [
        i
        for i in range(1, n)
        if (before := text[: toks[i][0]].rstrip(" \t\r\n")) != text[: toks[i][0]]
        and before.endswith((".", ":"))
    ]

    def score(begin: int) -> tuple[int, int, int]:
        seen: set[int] = set()
        total, first, end = 0, -1, 0
        for a, b, k in spans:
            if begin <= a < begin + window:
                total += 1 if k in seen else 1000
                seen.add(k)
                first = a if first < 0 else first
                end = b
        return total, first, end

    best, best_start = 0, 0
    for a, _, _ in spans:
        total, first, end = score(a)
        if total > best:
            best, best_start = (
                total,
                max(0, min(first - int((window - (end - first)) / 2), n - window)),
            )
        sentence = max(s for s in starts if s <= a)
        if sentence < a:
            total = score(sentence)[0] + (120 if sentence == 0 else 100)
            if total > best:
                best, best_start = total, sentence
    return best_start
