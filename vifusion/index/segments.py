"""Turn frame hits into moments: runs of consecutive matching frames of one video."""

from __future__ import annotations

from collections import defaultdict

from vifusion.types import SearchHit, Segment


def _by_video(hits: list[SearchHit]) -> dict[int, list[SearchHit]]:
    """Hits per video, one per distinct time span (the best score wins), sorted by time."""
    best: dict[tuple[int, float, float], SearchHit] = {}
    for h in hits:
        key = (h.video_id, h.t_start, h.t_end)
        if key not in best or h.score > best[key].score:
            best[key] = h
    videos: dict[int, list[SearchHit]] = defaultdict(list)
    for h in best.values():
        videos[h.video_id].append(h)
    for vh in videos.values():
        vh.sort(key=lambda h: (h.t_start, h.t_end))
    return videos


def _top(segments: list[Segment], top_k: int) -> list[Segment]:
    segments.sort(key=lambda s: (-s.score, s.video_id, s.start_s))
    return segments[:top_k]


def group_segments(
    hits: list[SearchHit], max_gap_s: float, drop: float, top_k: int
) -> list[Segment]:
    """Group frame hits into segments and return the ``top_k`` best, highest score first.

    Seed and grow: the best hit not yet in a segment seeds one, which grows over neighbouring
    hits of the same video (in time, gap <= ``max_gap_s``) while their score stays >=
    ``seed * (1 - drop)``. So a segment is the stretch around a peak, and a weaker stretch
    next to it (another scene) is a segment of its own. Only frames among ``hits`` count,
    so a segment is as complete as the search's k allowed. Hits with the same video and
    time span (the same frame found twice) count once, with their best score.
    """
    if max_gap_s < 0 or not 0 <= drop <= 1:
        raise ValueError(f"need max_gap_s >= 0 and 0 <= drop <= 1, got {max_gap_s}, {drop}")
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    segments: list[Segment] = []
    for video_id, vh in _by_video(hits).items():
        taken = [False] * len(vh)
        for seed in sorted(range(len(vh)), key=lambda i: -vh[i].score):
            if taken[seed]:
                continue
            floor = vh[seed].score * (1 - drop) if vh[seed].score > 0 else vh[seed].score
            lo = hi = seed
            while lo > 0 and _joins(vh[lo - 1], vh[lo], taken[lo - 1], floor, max_gap_s):
                lo -= 1
            while hi + 1 < len(vh) and _joins(
                vh[hi + 1], vh[hi], taken[hi + 1], floor, max_gap_s, after=True
            ):
                hi += 1
            for i in range(lo, hi + 1):
                taken[i] = True
            segments.append(
                Segment(
                    video_id,
                    vh[lo].t_start,
                    max(h.t_end for h in vh[lo : hi + 1]),
                    vh[seed].score,
                    hi - lo + 1,
                )
            )
    return _top(segments, top_k)


def _joins(
    h: SearchHit, edge: SearchHit, taken: bool, floor: float, max_gap_s: float, after: bool = False
) -> bool:
    """Whether ``h``, next to a segment's ``edge`` frame, extends the segment."""
    gap = h.t_start - edge.t_end if after else edge.t_start - h.t_end
    return not taken and gap <= max_gap_s and h.score >= floor


def group_videos(hits: list[SearchHit], top_k: int) -> list[Segment]:
    """One segment per video: its best frame's span and score (frames=1), best first."""
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    best: dict[int, SearchHit] = {}
    for h in hits:
        if h.video_id not in best or h.score > best[h.video_id].score:
            best[h.video_id] = h
    return _top([Segment(v, h.t_start, h.t_end, h.score, 1) for v, h in best.items()], top_k)
