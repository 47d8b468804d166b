"""One ranking of moments blended from several ranked lists (visual concepts, speech, screen
text, dense and keyword), whose scores are not comparable (a cosine, a BM25). ``BLENDS``:
``rrf`` scores a moment the sum of ``1 / (k + rank)`` over its lists (ranks only);
``calibrated`` the sum of each candidate's score mapped to [0, 1] by the caller;
``evidence`` the noisy-or of each candidate's probability of being relevant (the caller maps
its raw score by ``evidence``, a logistic fit per source on labelled lists), so a list of
weak hits adds little however it ranks within itself.

Candidates of one video whose spans overlap (or come within ``join_gap_s``) are one moment:
the strongest seeds it, weaker ones add their list's share (once per list) and their
modality to ``matched``. A moment spans its strongest candidate with words, else its
strongest frames; its ``snippet`` is that candidate's words.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

RRF_K = 60  # the constant of Cormack et al. (2009): damps the weight of the very top ranks
BLENDS = ("rrf", "calibrated", "evidence")  # rrf: reciprocal rank fusion, its usual name
MODALITIES = ("visual", "speech", "screen")  # what a moment is found by: seen, said, written
ALIASES = {"text": "screen"}  # other names users give a modality

# The evidence blend's table: per source (``SOURCES``), the logistic fit (raw score, rank in its
# list) -> relevant, made by scripts/fit_evidence.py (how, when, on what: in the file). The rank
# is there because a cosine alone says little across queries (ConSE's frames: the right one
# at 0.3 for one query, a wrong one at 0.5 for another) where the list's first is often right.
EVIDENCE_FILE = Path(__file__).parent / "data" / "evidence.json"
# The ranked lists a text query makes, each a source of evidence with its own raw score:
# a cosine ("visual": the frames' concepts; "*_dense": the words' meaning) or the share of the
# query's words a text holds ("*_keyword").
SOURCES = ("visual", "speech_dense", "speech_keyword", "screen_dense", "screen_keyword")
# A hit less likely than this to be relevant neither makes a moment nor counts as matched.
EVIDENCE_MIN = 0.01


@cache
def evidence_table() -> dict[str, tuple[float, float, float]]:
    """Per source, the (intercept, slope, rank slope) of its logistic fit (``EVIDENCE_FILE``)."""
    fits = json.loads(EVIDENCE_FILE.read_text())["sources"]
    return {s: (fits[s]["intercept"], fits[s]["slope"], fits[s]["log_rank"]) for s in SOURCES}


def evidence(source: str, raw: float, rank: int = 1) -> float:
    """The probability that a hit of ``source`` (one of ``SOURCES``) with raw score ``raw``,
    ``rank``-th in its list (from 1), is relevant: rises with ``raw``, on one scale for every
    source and every query."""
    intercept, slope, log_rank = evidence_table()[source]
    z = intercept + slope * raw + log_rank * math.log(rank)
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


# The query's words in a snippet are marked with two control characters, which stored text
# never holds (the catalog drops them), so literal brackets in a slide's code stay text.
MARKS = ("\x02", "\x03")


def relative_cut(moments: list, fraction: float) -> list:
    """``moments`` (best first) less those scoring under ``fraction`` of the best: a query's
    tail of weak look-alikes is noise to a reader. ``fraction`` 0 keeps all."""
    if not moments or fraction <= 0:
        return list(moments)
    floor = fraction * moments[0].score
    return [m for m in moments if m.score >= floor]


def split_marks(snippet: str) -> tuple[str, list[tuple[int, int]]]:
    """A marked snippet as its plain text and the [start, end) character spans of its marked words."""
    text: list[str] = []
    spans: list[tuple[int, int]] = []
    at = 0
    for part in re.split(f"({MARKS[0]}[^{MARKS[1]}]*{MARKS[1]})", snippet):
        if part.startswith(MARKS[0]):
            word = part[1:-1]
            spans.append((at, at + len(word)))
            part = word
        text.append(part)
        at += len(part)
    return "".join(text), spans


def snippet_fields(marked: str | None, english: str | None = None) -> dict:
    """A moment's words as the API and ``--json`` give them: ``snippet`` (plain text, or None)
    and ``highlights`` (the [start, end) character spans of the query's words in it), in the
    language spoken; ``snippet_english`` and ``highlights_english`` the same of their English
    rendering (None and [] where there is none: English, or not translated)."""
    out: dict = {}
    for suffix, words in (("", marked), ("_english", english)):
        text, spans = split_marks(words) if words is not None else (None, [])
        out |= {f"snippet{suffix}": text, f"highlights{suffix}": [list(s) for s in spans]}
    return out


def bracketed(text: str, highlights: list) -> str:
    """A snippet for a terminal: the words at ``highlights`` (as ``snippet_fields`` gives them) between [ ]."""
    out, at = [], 0
    for start, end in highlights:
        out += [text[at:start], "[", text[start:end], "]"]
        at = end
    return "".join(out) + text[at:]


@dataclass(frozen=True)
class Candidate:
    """One entry of one ranked list: a stretch of a video, found by ``modality``."""

    video_id: int
    start_s: float
    end_s: float
    score: float
    modality: str  # visual | speech | screen
    snippet: str | None = None  # the spoken or written words, query words marked
    snippet_english: str | None = None  # their English rendering, marked alike (None: none)
    language: str | None = None  # the language the words were said in (ISO 639-1; None: not known)


@dataclass
class Moment:
    """A fused result: a stretch of a video, its fused score, who found it and what was said
    or written there."""

    video_id: int
    start_s: float
    end_s: float
    score: float
    matched: list[str] = field(default_factory=list)
    snippet: str | None = None
    frames: int = 1
    snippet_english: str | None = None  # the snippet's English rendering (None: none)
    language: str | None = None  # the language the snippet was said in (None: not known)


def blend_lists(
    lists: list[list[Candidate]],
    top_k: int,
    join_gap_s: float = 0.0,
    method: str = "rrf",
    k: float = RRF_K,
) -> list[Moment]:
    """The ``top_k`` best moments over ``lists`` (each ranked best first), best first.

    ``method`` "rrf": a list adds ``1 / (k + rank)`` (rank from 1) to a moment; "calibrated":
    it adds its candidate's ``score`` (already in [0, 1]); "evidence": the candidate's
    ``score`` is a probability of relevance, and a moment scores the noisy-or of its lists'
    (``1 - prod(1 - p)``: it is relevant unless every list that found it is wrong). Either way
    a list counts once per moment, with its strongest candidate there. Ties go to the moment
    whose seed came from the earlier list, then the better rank.
    """
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if method not in BLENDS:
        raise ValueError(f"blend must be one of {BLENDS}, got {method!r}")
    entries = [
        (_share(method, c.score, k, rank), li, rank, c)
        for li, ranked in enumerate(lists)
        for rank, c in enumerate(ranked, start=1)
    ]
    entries.sort(key=lambda e: (-e[0], e[1], e[2]))  # the strongest first: it seeds its moment
    moments: list[Moment] = []
    credited: list[set[int]] = []  # per moment: the lists that added to its score
    seeds: list[tuple[int, int]] = []  # per moment: (list, rank) of its seed, for ties
    of_video: dict[int, list[int]] = {}  # video id -> its moments' indices
    for share, li, rank, c in entries:
        mine = of_video.setdefault(c.video_id, [])
        i = next((j for j in mine if _overlap(c, moments[j], join_gap_s)), None)
        if i is None:
            i = len(moments)
            moments.append(
                Moment(
                    c.video_id,
                    c.start_s,
                    c.end_s,
                    0.0,
                    snippet=c.snippet,
                    snippet_english=c.snippet_english,
                    language=c.language,
                )
            )
            credited.append(set())
            seeds.append((li, rank))
            mine.append(i)
        m = moments[i]
        if c.snippet is not None and m.snippet is None:  # the moment's first words place it
            m.start_s, m.end_s, m.snippet = c.start_s, c.end_s, c.snippet
            m.snippet_english, m.language = c.snippet_english, c.language
        if c.modality not in m.matched:
            m.matched.append(c.modality)
        if li not in credited[i]:
            credited[i].add(li)
            m.score += share
    if method == "evidence":  # summed -log(1 - p) back to a probability
        for m in moments:
            m.score = -math.expm1(-m.score)
    order = sorted(
        range(len(moments)),
        key=lambda i: (-moments[i].score, seeds[i], moments[i].video_id, moments[i].start_s),
    )
    return [moments[i] for i in order[:top_k]]


def _share(method: str, score: float, k: float, rank: int) -> float:
    """What one list's candidate adds to its moment's score: summed, ``evidence``'s
    ``-log(1 - p)`` give the noisy-or's ``-log(1 - P)`` (a probability of 1 counts as 1 - 1e-9)."""
    if method == "rrf":
        return 1.0 / (k + rank)
    if method == "evidence":
        return -math.log1p(-min(float(score), 1.0 - 1e-9))
    return float(score)


def _overlap(c: Candidate, m: Moment, gap_s: float) -> bool:
    """Whether ``c`` shares time with ``m`` (spans that only touch do not; an instant does
    when it falls inside or on an edge), allowing ``gap_s`` between them."""
    lo, hi = max(c.start_s, m.start_s), min(c.end_s, m.end_s) + gap_s
    return lo < hi or (lo == hi and (c.start_s == c.end_s or m.start_s == m.end_s))
