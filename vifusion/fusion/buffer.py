"""Fusion buffers: many small per-frame feature tensors in, few large transfers out.

One buffer per destination shard. A buffer flushes when its bytes reach ``max_bytes`` or
its oldest frame is ``max_age_s`` old, so a transfer is large when frames come fast and
no frame waits long when they come slowly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FrameFeatures, FusedBatch

# ids (8) + times (8) + features (4 * dims): what one frame adds to a FusedBatch
FRAME_BYTES = 8 + 8 + 4 * (VISUAL_DIM + SEMANTIC_DIM)


class FusionBuffer:
    """Frames bound for one destination, waiting to travel together."""

    def __init__(self, max_bytes: int, max_age_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self._clock = clock
        self._frames: list[FrameFeatures] = []
        self._oldest = 0.0

    def __len__(self) -> int:
        return len(self._frames)

    @property
    def nbytes(self) -> int:
        return len(self._frames) * FRAME_BYTES

    def add(self, frames: list[FrameFeatures]) -> None:
        if frames and not self._frames:
            self._oldest = self._clock()
        self._frames.extend(frames)

    def due(self) -> bool:
        """True when the buffer should be flushed now (size or age reached)."""
        if not self._frames:
            return False
        return self.nbytes >= self.max_bytes or self._clock() - self._oldest >= self.max_age_s

    def flush(self) -> FusedBatch | None:
        """Everything buffered as one batch (None when empty)."""
        if not self._frames:
            return None
        batch = FusedBatch.from_frames(self._frames)
        self._frames = []
        return batch


class Fuser:
    """Per-destination fusion buffers with one policy (size or age)."""

    def __init__(self, max_bytes: int, max_age_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._make = lambda: FusionBuffer(max_bytes, max_age_s, clock)
        self._buffers: dict[Hashable, FusionBuffer] = {}

    def add(self, dest: Hashable, frames: list[FrameFeatures]) -> list[tuple[Hashable, FusedBatch]]:
        """Buffer frames for ``dest``; returns the batches now due, for any destination."""
        self._buffers.setdefault(dest, self._make()).add(frames)
        return self.poll()

    def poll(self) -> list[tuple[Hashable, FusedBatch]]:
        """The batches whose size or age says they must go now."""
        return [(d, b.flush()) for d, b in self._buffers.items() if b.due()]

    def flush(self, dest: Hashable) -> FusedBatch | None:
        """Force out what ``dest`` holds (end of a video: its frames must be acknowledged)."""
        buf = self._buffers.get(dest)
        return buf.flush() if buf else None

    def pending(self, dest: Hashable) -> int:
        buf = self._buffers.get(dest)
        return len(buf) if buf else 0
