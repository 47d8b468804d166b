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


def group_segments(hits: list[SearchHit], max_gap_s: float, drop: float, top_k: int) -> list[Segment]:
    """Group frame hits into segments and return the ``top_k`` best, highest score first.

    Within a video, in time order, a hit joins the current segment while the gap from the
    segment's end to the hit's start is <= ``max_gap_s`` and its score is >= the segment's
    best minus ``drop``; otherwise it starts a new segment. Only frames among ``hits`` count,
    so a segment is as complete as the search's k allowed. Hits with the same video and time
    span (e.g. the same frame found twice) count once, with their best score.
    """
    if max_gap_s < 0 or drop < 0:
        raise ValueError(f"max_gap_s and drop must be >= 0, got {max_gap_s}, {drop}")
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    segments: list[Segment] = []
    for video_id, vh in _by_video(hits).items():
        start, end, best, frames = vh[0].t_start, vh[0].t_end, vh[0].score, 1
        for h in vh[1:]:
            if h.t_start - end <= max_gap_s and h.score >= best - drop:
                end, best, frames = max(end, h.t_end), max(best, h.score), frames + 1
            else:
                segments.append(Segment(video_id, start, end, best, frames))
                start, end, best, frames = h.t_start, h.t_end, h.score, 1
        segments.append(Segment(video_id, start, end, best, frames))
    return _top(segments, top_k)


def group_videos(hits: list[SearchHit], top_k: int) -> list[Segment]:
    """One segment per video: its best frame's span and score (frames=1), best first."""
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    best: dict[int, SearchHit] = {}
    for h in hits:
        if h.video_id not in best or h.score > best[h.video_id].score:
            best[h.video_id] = h
    return _top([Segment(v, h.t_start, h.t_end, h.score, 1) for v, h in best.items()], top_k)
