"""Random, L2-normalised test data for the index tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FusedBatch, vector_id


def unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def make_batch(
    video_id: int, frames: int, seed: int = 0, first_frame: int = 0, interval: float = 1.0
) -> FusedBatch:
    """``frames`` consecutive sampled frames of one video, frame i spanning [i*interval, (i+1)*interval)."""
    rng = np.random.default_rng(seed)
    nos = np.arange(first_frame, first_frame + frames)
    features = np.concatenate(
        [unit(rng, frames, VISUAL_DIM), unit(rng, frames, SEMANTIC_DIM)], axis=1
    )
    times = np.stack([nos * interval, (nos + 1) * interval], axis=1).astype(np.float32)
    ids = np.array([vector_id(video_id, int(n)) for n in nos], dtype=np.int64)
    return FusedBatch(ids=ids, times=times, features=np.ascontiguousarray(features))


def assert_same_answers(a, b, queries: dict[str, np.ndarray], k: int = 10) -> None:
    """Shards ``a`` and ``b`` answer each space's ``queries`` alike: the same scores, ids
    and times, to the bit."""
    for space, q in queries.items():
        for x, y in zip(a.search(space, q, k), b.search(space, q, k), strict=True):
            np.testing.assert_array_equal(x, y)


def record_offsets(segment: Path) -> list[int]:
    """The byte offset of each record in a whole log segment (after its 8-byte header; a
    record is its 16-byte header, whose first 4 bytes are the payload's length, then that)."""
    data = segment.read_bytes()
    offsets, pos = [], 8
    while pos < len(data):
        offsets.append(pos)
        pos += 16 + int.from_bytes(data[pos : pos + 4], "little")
    return offsets
