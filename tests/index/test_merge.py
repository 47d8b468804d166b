from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vifusion.config import Config
from vifusion.index.merge import merge_topk
from vifusion.index.shard import Shard
from vifusion.types import FRAME_BITS, SearchHit, row_no

from ._helpers import make_batch, unit

CFG = Config(faiss_threads=1)


def _fake_shard(rng: np.random.Generator, nq: int, k: int, found: int, base_video: int):
    """A shard's sorted top-k with only ``found`` real results per query (-1 after)."""
    scores = np.full((nq, k), np.finfo(np.float32).min, np.float32)
    ids = np.full((nq, k), -1, np.int64)
    times = np.zeros((nq, k, 2), np.float32)
    scores[:, :found] = -np.sort(-rng.uniform(-1, 1, (nq, found)).astype(np.float32), axis=1)
    videos = base_video + rng.integers(0, 5, (nq, found))
    ids[:, :found] = (videos << FRAME_BITS) | rng.integers(0, 1000, (nq, found))
    times[:, :found, 0] = rng.uniform(0, 100, (nq, found))
    times[:, :found, 1] = times[:, :found, 0] + 1
    return scores, ids, times


def _brute_force(per_shard, k: int) -> list[list[SearchHit]]:
    scores = np.concatenate([s for s, _, _ in per_shard], axis=1)
    ids = np.concatenate([i for _, i, _ in per_shard], axis=1)
    times = np.concatenate([t for _, _, t in per_shard], axis=1)
    out = []
    for q in range(scores.shape[0]):
        order = [j for j in np.argsort(-scores[q], kind="stable") if ids[q, j] >= 0][:k]
        out.append(
            [
                SearchHit(
                    int(ids[q, j] >> FRAME_BITS),
                    float(times[q, j, 0]),
                    float(times[q, j, 1]),
                    float(scores[q, j]),
                    int(row_no(ids[q, j])),
                )
                for j in order
            ]
        )
    return out


@pytest.mark.parametrize("k", [1, 4, 10, 25])
def test_merge_equals_brute_force_topk(k: int) -> None:
    rng = np.random.default_rng(k)
    per_shard = [
        _fake_shard(rng, 6, 10, found, base)
        for found, base in ((10, 0), (3, 100), (0, 200), (7, 300))
    ]
    merged = merge_topk(per_shard, k)
    assert merged == _brute_force(per_shard, k)
    assert [len(hits) for hits in merged] == [min(k, 20)] * 6
    for hits in merged:
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_merge_of_real_shards_equals_one_big_shard(tmp_path: Path) -> None:
    shards = [Shard(i, tmp_path / str(i), CFG) for i in range(3)]
    whole = Shard(9, tmp_path / "whole", CFG)
    for video in range(9):
        batch = make_batch(video, 12, seed=video)
        shards[video % 3].add(batch)
        whole.add(batch)
    q = unit(np.random.default_rng(42), 5, 384)
    k = 16
    merged = merge_topk([s.search("semantic", q, k) for s in shards], k)
    scores, ids, times = whole.search("semantic", q, k)
    for qi, hits in enumerate(merged):
        assert [h.video_id for h in hits] == (ids[qi] >> FRAME_BITS).tolist()
        np.testing.assert_allclose([h.score for h in hits], scores[qi], rtol=1e-6)
        np.testing.assert_array_equal([(h.t_start, h.t_end) for h in hits], times[qi])


def test_merge_edge_cases() -> None:
    assert merge_topk([], 5) == []
    rng = np.random.default_rng(0)
    empty = _fake_shard(rng, 2, 4, 0, 0)
    assert merge_topk([empty, empty], 3) == [[], []]
    with pytest.raises(ValueError):
        merge_topk([empty], 0)
    with pytest.raises(ValueError, match="number of queries"):
        merge_topk([empty, _fake_shard(rng, 3, 4, 0, 0)], 3)
