"""Temporal dedup: consecutive frames of one video that look the same become one vector with
a time range, before anything crosses the link.

A run starts at a frame (its anchor) and takes each next frame of the same video whose
cosine with the anchor is at least ``threshold`` in both spaces. Comparing with the anchor,
not with the previous frame, keeps a slow pan from merging into one endless run. A run
leaves as one row: the anchor's id (frame number), the run's whole time span, and the mean
of its vectors re-normalised per space (features are L2-normalised, so the inner-product
search sees a unit vector as always). A run of one frame leaves bit-identical.

Rows come in as matrices: the cosines of a block of rows with each other are one matrix
product, and only the scan for run boundaries walks the rows.

Only frames make runs. A speech segment or a screen-text span (``types.kind_of``) passes at
once, exactly as it came: the same words said twice are two moments, and a still scene's
run of frames goes on around the text rows that arrive between its frames.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from vifusion.types import FRAME, VISUAL_DIM, FusedBatch, kind_of, video_of

_BLOCK = 32  # rows compared at once: the Gram matrix costs (1 + _BLOCK) dot products a row


@dataclass
class _Run:
    anchor: np.ndarray  # (D,) the anchor row
    vector_id: int
    t_start: float
    t_end: float
    total: np.ndarray  # (D,) sum of the run's rows
    frames: int
    since: float  # when the anchor arrived (sender clock)


class TemporalDedup:
    """Open runs per video; ``threshold`` > 1 turns merging off (every row passes)."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self._runs: dict[int, _Run] = {}
        self.frames_in = 0
        self.frames_out = 0

    @property
    def enabled(self) -> bool:
        return self.threshold <= 1

    def push(self, batch: FusedBatch, now: float = 0.0) -> FusedBatch:
        """Rows in stream order (per video), arrived at ``now``; returns the runs they closed."""
        self.frames_in += len(batch)
        if not self.enabled:
            self.frames_out += len(batch)
            return batch
        out: list[FusedBatch] = []
        is_frame = kind_of(batch.ids) == FRAME
        if not is_frame.all():
            out.append(batch.rows(~is_frame))
            batch = batch.rows(is_frame)
        videos = video_of(batch.ids)
        one_video = bool((videos == videos[0]).all()) if len(videos) else True
        for v in dict.fromkeys(videos.tolist()):  # in order of first appearance
            mine = batch if one_video else batch.rows(np.flatnonzero(videos == v))
            for lo in range(0, len(mine), _BLOCK):
                out.extend(self._push_block(v, mine.rows(slice(lo, lo + _BLOCK)), now))
        closed = FusedBatch.concat(out)
        self.frames_out += len(closed)
        return closed

    def close(self, video_id: int) -> FusedBatch:
        """The video's open run (its end has come)."""
        run = self._runs.pop(video_id, None)
        if run is None:
            return FusedBatch.empty()
        self.frames_out += 1
        return _emit([run])

    def drop(self, video_id: int) -> None:
        """Forget a failed video's open run."""
        self._runs.pop(video_id, None)

    def expire(self, before: float) -> FusedBatch:
        """Close the runs whose anchor arrived before ``before``: a still scene must not hold
        its frames back past the latency target."""
        old = [v for v, r in self._runs.items() if r.since < before]
        if not old:
            return FusedBatch.empty()
        self.frames_out += len(old)
        return _emit([self._runs.pop(v) for v in old])

    def oldest(self) -> float | None:
        """When the oldest open run's anchor arrived (None: no open run)."""
        return min((r.since for r in self._runs.values()), default=None)

    def _push_block(self, video: int, block: FusedBatch, now: float) -> list[FusedBatch]:
        """One video's next rows: extend its open run, close runs, leave the last one open."""
        x = block.features
        run = self._runs.get(video)
        a = x if run is None else np.vstack([run.anchor[None], x])
        same = (
            (a[:, :VISUAL_DIM] @ a[:, :VISUAL_DIM].T >= self.threshold)
            & (a[:, VISUAL_DIM:] @ a[:, VISUAL_DIM:].T >= self.threshold)
        ).tolist()
        # Run starts, in rows of ``a``: a row joins the run of the last start if it matches
        # that start's anchor, otherwise it starts a run of its own.
        starts, anchor = [0], 0
        for j in range(1, len(a)):
            if not same[anchor][j]:
                starts.append(j)
                anchor = j
        off = 0 if run is None else 1  # row j of ``a`` is row j - off of the block
        bounds = [*starts, len(a)]
        closed: list[_Run | FusedBatch] = []
        for lo, hi in itertools.pairwise(bounds):
            last = hi == len(a)
            if run is not None and lo == 0:  # the open run goes on
                if hi > 1:
                    run.total = run.total + x[: hi - 1].sum(axis=0)
                    run.t_end = max(run.t_end, float(block.times[: hi - 1, 1].max()))
                    run.frames += hi - 1
                if not last:
                    closed.append(self._runs.pop(video))
                continue
            b_lo, b_hi = lo - off, hi - off
            if not last and b_hi - b_lo == 1:
                closed.append(block.rows(slice(b_lo, b_hi)))  # a single frame leaves exact
                continue
            run = _Run(
                x[b_lo].copy() if last else x[b_lo],  # a run held open outlives the block
                int(block.ids[b_lo]),
                float(block.times[b_lo, 0]),
                float(block.times[b_lo:b_hi, 1].max()),
                x[b_lo:b_hi].sum(axis=0),
                b_hi - b_lo,
                now,
            )
            if last:
                self._runs[video] = run
            else:
                closed.append(run)
        return [c if isinstance(c, FusedBatch) else _emit([c]) for c in closed]


def _emit(runs: list[_Run]) -> FusedBatch:
    """Closed runs as rows: a run of one frame exactly as it came, longer ones averaged."""
    ids = np.array([r.vector_id for r in runs], np.int64)
    times = np.array([(r.t_start, r.t_end) for r in runs], np.float32).reshape(len(runs), 2)
    features = np.stack([r.anchor if r.frames == 1 else r.total for r in runs]).astype(np.float32)
    for i, r in enumerate(runs):
        if r.frames > 1:
            for part in (features[i, :VISUAL_DIM], features[i, VISUAL_DIM:]):
                n = float(np.linalg.norm(part))
                if n > 0:
                    part /= n
    return FusedBatch(ids, times, features)
