"""A clip as a query: decoded within the caps a service sets (``decode_clip``), then aligned
in time against the shards' answers (``align_clip``): each sampled frame votes for (video,
offset) pairs, and the offset most of the clip agrees on wins."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from vifusion.config import Config
from vifusion.types import SearchHit, Segment

if TYPE_CHECKING:
    from vifusion.extract.decode import Batches

MAX_CLIP_FRAMES = 64
_CLIP_BATCH = 8  # sampled frames of a query clip decoded between two looks at the clock


class ClipRefused(ValueError):
    """A query clip the service will not search with; ``code`` and ``status`` are how the
    API answers it."""

    def __init__(self, code: str, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


def decode_clip(path: Path, cfg: Config) -> Batches:
    """A query clip's sampled frames, as ``decode`` yields them, within the clip caps: one
    longer than ``cfg.max_query_clip_s`` (probed, not decoded) or taking longer than
    ``cfg.query_clip_decode_budget_s`` to decode (checked every ``_CLIP_BATCH`` frames) is
    ClipRefused, a 422: the clip is at fault, and sent again it would cost as much again."""
    from vifusion.extract.decode import open_sampled

    t0 = time.monotonic()
    info, _, batches = open_sampled(path, cfg.sample_fps, MAX_CLIP_FRAMES, batch=_CLIP_BATCH)
    if info.duration_s > cfg.max_query_clip_s:
        raise ClipRefused(
            "clip_too_long",
            f"the clip is {info.duration_s:.1f} s long; the limit is {cfg.max_query_clip_s:g} s",
        )
    spent = time.monotonic() - t0
    while spent <= cfg.query_clip_decode_budget_s:
        t0 = time.monotonic()
        batch = next(batches, None)
        spent += time.monotonic() - t0
        if batch is None:
            return
        yield batch
    raise ClipRefused(
        "clip_too_costly",
        f"decoding the clip took over {cfg.query_clip_decode_budget_s:g} s; "
        "send a shorter clip or one of a smaller picture",
    )


def align_clip(
    per_frame: list[list[SearchHit]],
    spans: list[tuple[int, float, float]],
    interval_s: float,
    top_k: int,
) -> list[Segment]:
    """Vote over (video, time offset): each clip frame adds its best score at every
    offset it supports; a candidate's score is the mean over the clip's frames."""
    votes: dict[tuple[int, int], dict[int, float]] = defaultdict(dict)
    for i, (hits, (_, q_start, _)) in enumerate(zip(per_frame, spans)):
        for h in hits:
            key = (h.video_id, round((h.t_start - q_start) / interval_s))
            votes[key][i] = max(votes[key].get(i, -1.0), h.score)
    n = len(spans)
    clip_len = spans[-1][2] - spans[0][1]
    ranked = sorted(((sum(v.values()) / n, key) for key, v in votes.items()), reverse=True)
    out: list[Segment] = []
    taken: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for score, (video_id, offset) in ranked:
        start = max(0.0, offset * interval_s + spans[0][1])
        end = start + clip_len
        if any(start < e and s < end for s, e in taken[video_id]):
            continue  # a neighbouring offset of a moment already returned
        taken[video_id].append((start, end))
        out.append(Segment(video_id, start, end, float(score), len(votes[(video_id, offset)])))
        if len(out) == top_k:
            break
    return out
