"""Types that cross a stage boundary, in one place.

Vector ids: every row of a video gets one int64 id, ``video_id << FRAME_BITS | row``, so a
video's vectors are one contiguous id range (cheap to delete, cheap to route) and
re-indexing a video writes the same ids again (idempotent). The top two of the row's
``FRAME_BITS`` bits say what the row is (``kind_of``): a sampled frame (0, so a frame's id
is ``video_id << FRAME_BITS | frame_no`` as it always was), a speech segment (2) or an
on-screen text span (3); kind 1 is unused. The other ``KIND_SHIFT`` bits number the rows
of that kind within the video.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import numpy as np

FRAME_BITS = 24  # the row bits of a vector id: kind (2 bits), then the row's number
KIND_SHIFT = FRAME_BITS - 2
MAX_ROWS = 1 << KIND_SHIFT  # rows of one kind per video (4.2M; a video has <= max_frames frames)
FRAME, SPEECH, SCREEN = 0, 2, 3  # row kinds (1 is unused, so refused)
VISUAL_DIM = 1280  # EfficientNet-Lite0 pooled features
SEMANTIC_DIM = 384  # all-MiniLM-L6-v2 sentence space
FRAME_SPACES = ("visual", "semantic")  # a frame row is in both
TEXT_SPACES = ("speech", "screen")  # a text row is in one: its kind's (its semantic columns)
SPACES = FRAME_SPACES + TEXT_SPACES
KIND_OF_SPACE = {"visual": FRAME, "semantic": FRAME, "speech": SPEECH, "screen": SCREEN}


def _row_id(video_id: int, kind: int, n: int) -> int:
    if not 0 <= n < MAX_ROWS:
        raise ValueError(f"row number {n} out of range [0, {MAX_ROWS})")
    return (video_id << FRAME_BITS) | (kind << KIND_SHIFT) | n


def vector_id(video_id: int, frame_no: int) -> int:
    """The id of a video's ``frame_no``-th sampled frame."""
    return _row_id(video_id, FRAME, frame_no)


def speech_id(video_id: int, n: int) -> int:
    """The id of a video's ``n``-th speech segment."""
    return _row_id(video_id, SPEECH, n)


def screen_id(video_id: int, n: int) -> int:
    """The id of a video's ``n``-th on-screen text span."""
    return _row_id(video_id, SCREEN, n)


def kind_of(vector_ids: np.ndarray | int) -> np.ndarray | int:
    """The row kind(s) of vector id(s): FRAME, SPEECH or SCREEN (1: not a valid id)."""
    return (vector_ids >> KIND_SHIFT) & 3


def row_no(vector_ids: np.ndarray | int) -> np.ndarray | int:
    """The number(s) of the row(s) within their video and kind (a frame's frame_no, a speech
    segment's n: its key in the catalog's texts)."""
    return vector_ids & (MAX_ROWS - 1)


def video_of(vector_ids: np.ndarray | int) -> np.ndarray | int:
    """The video id(s) that vector id(s) belong to."""
    return vector_ids >> FRAME_BITS


def video_id_range(video_id: int) -> tuple[int, int]:
    """Half-open range [lo, hi) of the vector ids of one video."""
    return video_id << FRAME_BITS, (video_id + 1) << FRAME_BITS


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
    def of_video(
        cls,
        video_id: int,
        first_frame: int,
        spans: np.ndarray,
        visual: np.ndarray,
        semantic: np.ndarray,
    ) -> FusedBatch:
        """Consecutive sampled frames of one video: ``first_frame`` onwards, ``spans`` (n, 2)
        their time spans, ``visual`` / ``semantic`` their (n, d) features."""
        n = len(spans)
        if first_frame < 0 or first_frame + n > MAX_ROWS:
            raise ValueError(f"frames {first_frame}..{first_frame + n} out of range")
        ids = (np.int64(video_id) << FRAME_BITS) + np.arange(
            first_frame, first_frame + n, dtype=np.int64
        )
        features = np.concatenate([visual, semantic], axis=1).astype(np.float32, copy=False)
        return cls(ids, np.asarray(spans, np.float32).reshape(n, 2), np.ascontiguousarray(features))

    @classmethod
    def of_texts(
        cls, video_id: int, kind: str, first: int, spans: np.ndarray, vectors: np.ndarray
    ) -> FusedBatch:
        """A video's speech segments (``kind`` "speech") or on-screen text spans ("screen"),
        numbered ``first`` onwards: ``spans`` (n, 2) their times, ``vectors`` (n, 384) their
        sentence embeddings. A text row is a fused row like a frame's, with its embedding in
        the semantic columns and zeros in the visual ones, so it travels the frames' path
        (dedup, codecs, log) as it is; the shard files it under its kind's space."""
        if kind not in TEXT_SPACES:
            raise ValueError(f"unknown text kind {kind!r}; expected one of {TEXT_SPACES}")
        n = len(spans)
        vectors = np.asarray(vectors, np.float32)
        if vectors.shape != (n, SEMANTIC_DIM):
            raise ValueError(
                f"{n} {kind} rows need ({n}, {SEMANTIC_DIM}) vectors, got {vectors.shape}"
            )
        if first < 0 or first + n > MAX_ROWS:
            raise ValueError(f"{kind} rows {first}..{first + n} out of range")
        base = (np.int64(video_id) << FRAME_BITS) | (np.int64(KIND_OF_SPACE[kind]) << KIND_SHIFT)
        features = np.zeros((n, VISUAL_DIM + SEMANTIC_DIM), np.float32)
        features[:, VISUAL_DIM:] = vectors
        return cls(
            base + np.arange(first, first + n, dtype=np.int64),
            np.asarray(spans, np.float32).reshape(n, 2),
            features,
        )

    @classmethod
    def empty(cls) -> FusedBatch:
        # No batch id: nothing sends an empty batch, and the aggregator's pump asks for one
        # on every turn (a uuid4 each cost it a tenth of its time at 1 Gbit).
        return cls(
            np.zeros(0, np.int64),
            np.zeros((0, 2), np.float32),
            np.zeros((0, VISUAL_DIM + SEMANTIC_DIM), np.float32),
            "",
        )

    @classmethod
    def concat(cls, batches: list[FusedBatch]) -> FusedBatch:
        """One batch of all rows, in order (a new batch id)."""
        if len(batches) == 1:
            return batches[0]
        if not batches:
            return cls.empty()
        return cls(
            np.concatenate([b.ids for b in batches]),
            np.concatenate([b.times for b in batches]),
            np.concatenate([b.features for b in batches]),
        )

    def rows(self, index: slice | np.ndarray) -> FusedBatch:
        """The rows ``index`` selects, as a batch of their own (a new batch id)."""
        return FusedBatch(self.ids[index], self.times[index], self.features[index])

    def check(self) -> None:
        """Raises ValueError unless the arrays agree in length and width and hold float32."""
        n = len(self.ids)
        want = (n, VISUAL_DIM + SEMANTIC_DIM)
        if (
            self.times.shape != (n, 2)
            or self.features.shape != want
            or self.features.dtype != np.float32
        ):
            raise ValueError(
                f"a batch of {n} ids needs times ({n}, 2) and float32 features {want}; got "
                f"{self.times.shape} and {self.features.dtype} {self.features.shape}"
            )

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


class Found(list):
    """Search results (a list) and the shards that did not answer: ``missing`` non-empty
    means a partial answer (those shards' videos could not be searched)."""

    def __init__(self, items=(), missing=()) -> None:
        super().__init__(items)
        self.missing: tuple[int, ...] = tuple(sorted(set(missing)))


@dataclass(frozen=True)
class SearchHit:
    """One row (a frame, a speech segment, a screen-text span) that matched a query; higher
    score = closer (inner product). ``row``: its number within its video and kind
    (``row_no``: a frame's frame_no, a text row's n, its key in the catalog's texts); -1
    where unknown."""

    video_id: int
    t_start: float
    t_end: float
    score: float
    row: int = -1


@dataclass(frozen=True)
class Segment:
    """Consecutive matching frames of one video, scored by the best of them."""

    video_id: int
    start_s: float
    end_s: float
    score: float
    frames: int
