"""Types that cross a stage boundary, in one place.

Vector ids: every sampled frame gets one int64 id, ``video_id << FRAME_BITS | frame_no``,
so a video's vectors are one contiguous id range (cheap to delete, cheap to route) and
re-indexing a video writes the same ids again (idempotent).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import numpy as np

FRAME_BITS = 24  # up to 16.7M sampled frames per video
VISUAL_DIM = 1280  # EfficientNet-Lite0 pooled features
SEMANTIC_DIM = 384  # all-MiniLM-L6-v2 sentence space
SPACES = ("visual", "semantic")


def vector_id(video_id: int, frame_no: int) -> int:
    """The id of a video's ``frame_no``-th sampled frame."""
    if not 0 <= frame_no < (1 << FRAME_BITS):
        raise ValueError(f"frame_no {frame_no} out of range")
    return (video_id << FRAME_BITS) | frame_no


def video_of(vector_ids: np.ndarray | int) -> np.ndarray | int:
    """The video id(s) that vector id(s) belong to."""
    return vector_ids >> FRAME_BITS


def video_id_range(video_id: int) -> tuple[int, int]:
    """Half-open range [lo, hi) of the vector ids of one video."""
    return video_id << FRAME_BITS, (video_id + 1) << FRAME_BITS


@dataclass(frozen=True)
class FrameFeatures:
    """The features of one sampled frame: both spaces L2-normalised, float32.

    ``t_start``..``t_end`` is the time span (seconds) the frame stands for.
    """

    video_id: int
    frame_no: int
    t_start: float
    t_end: float
    visual: np.ndarray  # (VISUAL_DIM,)
    semantic: np.ndarray  # (SEMANTIC_DIM,)


@dataclass
class FusedBatch:
    """Many frames' features as one contiguous float32 array: one transfer, not n.

    ``features`` is (n, VISUAL_DIM + SEMANTIC_DIM), the visual columns first.
    ``batch_id`` is unique per batch so a receiver can drop a batch it has already applied.
    """

    ids: np.ndarray  # (n,) int64
    times: np.ndarray  # (n, 2) float32: t_start, t_end
    features: np.ndarray  # (n, VISUAL_DIM + SEMANTIC_DIM) float32, C-contiguous
    batch_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @classmethod
    def from_frames(cls, frames: list[FrameFeatures]) -> FusedBatch:
        n = len(frames)
        features = np.empty((n, VISUAL_DIM + SEMANTIC_DIM), dtype=np.float32)
        for i, f in enumerate(frames):
            features[i, :VISUAL_DIM] = f.visual
            features[i, VISUAL_DIM:] = f.semantic
        ids = np.fromiter((vector_id(f.video_id, f.frame_no) for f in frames), np.int64, n)
        times = np.array([(f.t_start, f.t_end) for f in frames], dtype=np.float32).reshape(n, 2)
        return cls(ids=ids, times=times, features=features)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes + self.times.nbytes + self.features.nbytes

    def space(self, name: str) -> np.ndarray:
        """The (n, d) view of one vector space: ``visual`` or ``semantic``."""
        if name == "visual":
            return self.features[:, :VISUAL_DIM]
        if name == "semantic":
            return self.features[:, VISUAL_DIM:]
        raise ValueError(f"unknown space {name!r}")


@dataclass(frozen=True)
class SearchHit:
    """One frame that matched a query; higher score = closer (inner product)."""

    video_id: int
    t_start: float
    t_end: float
    score: float


@dataclass(frozen=True)
class Segment:
    """Consecutive matching frames of one video, scored by the best of them."""

    video_id: int
    start_s: float
    end_s: float
    score: float
    frames: int
