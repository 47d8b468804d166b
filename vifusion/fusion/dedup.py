"""Temporal dedup: consecutive frames of one video that look the same become one vector with
a time range, before anything crosses the link.

A run starts at a frame (its anchor) and takes each next frame of the same video whose
cosine with the anchor is at least ``threshold`` in both spaces. Comparing with the anchor,
not with the previous frame, keeps a slow pan from merging into one endless run. A run
leaves as one ``FrameFeatures``: the anchor's id (frame number), the run's whole time span,
and the mean of its vectors re-normalised per space (features are L2-normalised, so the
inner-product search sees a unit vector as always).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vifusion.types import FrameFeatures


@dataclass
class _Run:
    anchor: FrameFeatures
    since: float  # when the anchor arrived (sender clock)
    t_end: float
    visual: np.ndarray = field(repr=False)
    semantic: np.ndarray = field(repr=False)
    frames: int = 1

    def merged(self) -> FrameFeatures:
        a = self.anchor
        if self.frames == 1:
            return a
        return FrameFeatures(a.video_id, a.frame_no, a.t_start, self.t_end,
                             _unit(self.visual), _unit(self.semantic))


class TemporalDedup:
    """Open runs per video; ``threshold`` > 1 turns merging off (every frame passes)."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self._runs: dict[int, _Run] = {}
        self.frames_in = 0
        self.frames_out = 0

    def push(self, frames: list[FrameFeatures], now: float = 0.0) -> list[FrameFeatures]:
        """Frames in stream order (per video), arrived at ``now``; returns the runs they closed."""
        out: list[FrameFeatures] = []
        for f in frames:
            self.frames_in += 1
            run = self._runs.get(f.video_id)
            if run is not None and self._same(run.anchor, f):
                run.t_end = max(run.t_end, f.t_end)
                run.visual = run.visual + f.visual
                run.semantic = run.semantic + f.semantic
                run.frames += 1
                continue
            if run is not None:
                out.append(run.merged())
            self._runs[f.video_id] = _Run(f, now, f.t_end, f.visual.astype(np.float32), f.semantic.astype(np.float32))
        self.frames_out += len(out)
        return out

    def close(self, video_id: int) -> list[FrameFeatures]:
        """The video's open run (its end has come)."""
        run = self._runs.pop(video_id, None)
        if run is None:
            return []
        self.frames_out += 1
        return [run.merged()]

    def drop(self, video_id: int) -> None:
        """Forget a failed video's open run."""
        self._runs.pop(video_id, None)

    def expire(self, before: float) -> list[FrameFeatures]:
        """Close the runs whose anchor arrived before ``before``: a still scene must not hold
        its frames back past the latency target."""
        old = [v for v, r in self._runs.items() if r.since < before]
        return [f for v in old for f in self.close(v)]

    def oldest(self) -> float | None:
        """When the oldest open run's anchor arrived (None: no open run)."""
        return min((r.since for r in self._runs.values()), default=None)

    def _same(self, a: FrameFeatures, b: FrameFeatures) -> bool:
        if self.threshold > 1:
            return False
        return float(a.visual @ b.visual) >= self.threshold and float(a.semantic @ b.semantic) >= self.threshold


def _unit(x: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(x))
    return (x / n).astype(np.float32) if n > 0 else x.astype(np.float32)
