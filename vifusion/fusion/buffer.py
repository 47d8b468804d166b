"""Fusion buffer: many small per-frame feature tensors in, few large transfers out.

One buffer per destination shard. It is due when its bytes reach the plan's ``max_bytes``
or its oldest frame is ``max_age_s`` old (``policy.py`` sets both from the link), so a
transfer is large when frames come fast and no frame waits long when they come slowly.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from vifusion.fusion.policy import FlushPlan
from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FrameFeatures, FusedBatch

# ids (8) + times (8) + features (4 * dims): what one frame adds to a FusedBatch
FRAME_BYTES = 8 + 8 + 4 * (VISUAL_DIM + SEMANTIC_DIM)


@dataclass(frozen=True)
class Taken:
    """One flushed batch and, per row, when its frame was extracted (for latency)."""

    batch: FusedBatch
    extracted: list[float]


class FusionBuffer:
    """Frames bound for one destination, waiting to travel together."""

    def __init__(self) -> None:
        self._items: deque[tuple[FrameFeatures, float, float]] = deque()  # frame, arrived, extracted

    def __len__(self) -> int:
        return len(self._items)

    @property
    def nbytes(self) -> int:
        return len(self._items) * FRAME_BYTES

    def add(self, frames: list[FrameFeatures], arrived: float, extracted: float) -> None:
        self._items.extend((f, arrived, extracted) for f in frames)

    def oldest(self) -> float | None:
        """When the oldest waiting frame arrived (None: empty)."""
        return self._items[0][1] if self._items else None

    def due(self, plan: FlushPlan, now: float) -> bool:
        """True when a transfer should leave now (size or age reached)."""
        if not self._items:
            return False
        return self.nbytes >= plan.max_bytes or now - self._items[0][1] >= plan.max_age_s

    def take(self, max_bytes: int) -> Taken | None:
        """The oldest frames, up to ``max_bytes`` (at least one), as one batch; None when empty."""
        if not self._items:
            return None
        n = min(len(self._items), max(1, max_bytes // FRAME_BYTES))
        items = [self._items.popleft() for _ in range(n)]
        return Taken(FusedBatch.from_frames([f for f, _, _ in items]), [e for _, _, e in items])

    def drop(self, video_id: int) -> int:
        """Remove a failed video's waiting frames; returns how many."""
        keep = deque(i for i in self._items if i[0].video_id != video_id)
        dropped = len(self._items) - len(keep)
        self._items = keep
        return dropped
