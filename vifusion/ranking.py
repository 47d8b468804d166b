"""One ranking of moments from several ranked lists (visual concepts, speech, screen text,
dense and keyword).

Each list ranks candidates by its own score, and the scores of different lists are not
comparable (a cosine, a BM25). Reciprocal rank fusion (RRF) sums ``1 / (k + rank)`` over the
lists a moment appears in, so a moment two lists agree on rises above one that only one list
found. Candidates of one video whose time spans overlap (or touch within ``join_gap_s``) are
one moment: its span is their union, its ``matched`` the modalities that found it, its
``snippet`` the words of its best-ranked text candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RRF_K = 60  # the constant of Cormack et al. (2009): damps the weight of the very top ranks


@dataclass(frozen=True)
class Candidate:
    """One entry of one ranked list: a stretch of a video, found by ``modality``."""

    video_id: int
    start_s: float
    end_s: float
    score: float
    modality: str  # visual | speech | screen
    snippet: str | None = None  # the spoken or written words, query words marked


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


def fuse(lists: list[list[Candidate]], top_k: int, join_gap_s: float = 0.0, k: float = RRF_K) -> list[Moment]:
    """The ``top_k`` best moments over ``lists`` (each ranked best first), best first.

    A moment's score is the sum of ``1 / (k + rank)`` (rank from 1) over the lists, counting a
    list once per moment (its best-ranked candidate there).
    """
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    moments: list[Moment] = []
    best_rank: list[float] = []  # per moment: the best rank any candidate of it had (snippet choice)
    of_video: dict[int, list[int]] = {}  # video id -> its moments' indices
    for ranked in lists:
        credited: set[int] = set()
        for rank, c in enumerate(ranked, start=1):
            mine = of_video.setdefault(c.video_id, [])
            i = next((j for j in mine if c.start_s <= moments[j].end_s + join_gap_s
                      and moments[j].start_s <= c.end_s + join_gap_s), None)
            if i is None:
                i = len(moments)
                moments.append(Moment(c.video_id, c.start_s, c.end_s, 0.0))
                best_rank.append(float("inf"))
                mine.append(i)
            m = moments[i]
            m.start_s, m.end_s = min(m.start_s, c.start_s), max(m.end_s, c.end_s)
            if c.modality not in m.matched:
                m.matched.append(c.modality)
            if c.snippet and (m.snippet is None or rank < best_rank[i]):
                m.snippet, best_rank[i] = c.snippet, rank
            if i not in credited:
                credited.add(i)
                m.score += 1.0 / (k + rank)
    moments.sort(key=lambda m: (-m.score, m.video_id, m.start_s))
    return moments[:top_k]

