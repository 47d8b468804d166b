"""Queries -> moments. Text searches the semantic space; an image or a clip the visual one.

A clip query is aligned in time: every sampled frame of the clip votes for
(video, offset) pairs, and the offset most of the clip agrees on wins, so a clip
finds the stretch of video it was cut from, not just one frame that looks alike.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from vifusion.config import Config
from vifusion.extract.decode import decode
from vifusion.extract.model import Embedder
from vifusion.index import ShardSet, group_segments
from vifusion.types import SearchHit, Segment

MAX_CLIP_FRAMES = 64


class Searcher:
    """Embeds a query, fans it out to every shard, merges and groups the hits."""

    def __init__(self, cfg: Config, shards: ShardSet, embedder: Embedder) -> None:
        self.cfg = cfg
        self.shards = shards
        self.embedder = embedder

    def _frames_to_fetch(self, top_k: int) -> int:
        return min(max(top_k * 20, 200), 2000)

    def _segments(self, hits: list[SearchHit], top_k: int) -> list[Segment]:
        return group_segments(hits, self.cfg.max_segment_gap_s, self.cfg.segment_drop, top_k)

    def text(self, query: str, top_k: int = 10) -> list[Segment]:
        if not query.strip():
            raise ValueError("empty text query")
        vec = self.embedder.embed_text([query])
        hits = self.shards.search("semantic", vec, self._frames_to_fetch(top_k))[0]
        return self._segments(hits, top_k)

    def image(self, image: np.ndarray, top_k: int = 10) -> list[Segment]:
        """``image``: (H, W, 3) uint8 RGB."""
        visual, _ = self.embedder.embed_images([image])
        hits = self.shards.search("visual", visual, self._frames_to_fetch(top_k))[0]
        return self._segments(hits, top_k)

    def clip(self, path: Path, top_k: int = 10) -> list[Segment]:
        """Moments that match a video clip (its first ``MAX_CLIP_FRAMES`` sampled frames)."""
        spans: list[tuple[int, float, float]] = []
        vectors = []
        for frames, batch_spans in decode(Path(path), self.cfg.sample_fps, MAX_CLIP_FRAMES):
            visual, _ = self.embedder.embed_frames(frames)
            vectors.append(visual)
            spans.extend(batch_spans)
        queries = np.concatenate(vectors)
        per_frame = self.shards.search("visual", queries, self._frames_to_fetch(top_k))
        return align_clip(per_frame, spans, self.cfg.sample_interval_s, top_k)


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
