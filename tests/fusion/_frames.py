"""Synthetic frame features for the fusion tests."""

import numpy as np

from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FusedBatch


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def frames(video_id: int, n: int, start: int = 0) -> FusedBatch:
    """n unrelated frames (random unit vectors), one second each."""
    rng = np.random.default_rng(video_id * 1000 + start)
    return rows(
        video_id,
        unit(rng.standard_normal((n, VISUAL_DIM))),
        unit(rng.standard_normal((n, SEMANTIC_DIM))),
        start,
    )


def rows(video_id: int, visual: np.ndarray, semantic: np.ndarray, start: int = 0) -> FusedBatch:
    """Consecutive frames ``start``.. of a video with these features, one second each."""
    n = len(visual)
    spans = np.stack([np.arange(start, start + n), np.arange(start + 1, start + n + 1)], 1)
    return FusedBatch.of_video(video_id, start, spans, visual, semantic)


def join(*batches: FusedBatch) -> FusedBatch:
    return FusedBatch.concat(list(batches))
