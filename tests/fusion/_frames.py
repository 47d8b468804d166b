"""Synthetic frame features for the fusion tests."""

import numpy as np

from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FrameFeatures


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x)).astype(np.float32)


def frames(video_id: int, n: int, start: int = 0) -> list[FrameFeatures]:
    """n unrelated frames (random unit vectors), one second each."""
    rng = np.random.default_rng(video_id * 1000 + start)
    return [
        FrameFeatures(video_id, start + i, float(start + i), float(start + i + 1),
                      unit(rng.standard_normal(VISUAL_DIM)), unit(rng.standard_normal(SEMANTIC_DIM)))
        for i in range(n)
    ]
