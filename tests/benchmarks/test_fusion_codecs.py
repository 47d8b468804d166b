"""benchmarks/fusion.py's compression-enabled baselines (5)-(7) send what they say: each batch
in its codec on the wire, and the shard stores what that codec decodes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import ray

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import fusion  # noqa: E402

from vifusion.comm import Ladder, SharedTables  # noqa: E402
from vifusion.config import Config  # noqa: E402
from vifusion.index.replica import ShardReplica  # noqa: E402
from vifusion.types import FRAME_BITS, SEMANTIC_DIM, VISUAL_DIM, FusedBatch  # noqa: E402

D = VISUAL_DIM + SEMANTIC_DIM
CODEC_OF = {"5": "fp16", "6": "int8", "7": "sparse"}


@pytest.fixture(scope="module")
def pool() -> tuple[np.ndarray, np.ndarray]:
    """Two 'videos' of 128 unit rows (visual non-negative, as real ones are), and next_row."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2 * fusion.FRAMES_PER_SOURCE, D)).astype(np.float32)
    x[:, :VISUAL_DIM] = np.maximum(x[:, :VISUAL_DIM], 0) * rng.gamma(0.5, 1.0, VISUAL_DIM).astype(
        np.float32
    )
    for lo, hi in ((0, VISUAL_DIM), (VISUAL_DIM, D)):
        x[:, lo:hi] /= np.linalg.norm(x[:, lo:hi], axis=1, keepdims=True)
    next_row = np.minimum(np.arange(1, len(x) + 1), len(x) - 1)
    return x, next_row


@pytest.fixture(scope="module")
def tables(pool) -> SharedTables:
    return SharedTables.train(pool[0], keep=(0.3, 0.6))


def test_codec_policies_are_batched_as_2_is() -> None:
    for policy, codec in CODEC_OF.items():
        p = fusion.POLICIES[policy]
        assert p["codec"] == codec
        assert {k: p[k] for k in ("rows", "age", "window")} == {
            k: fusion.POLICIES["2"][k] for k in ("rows", "age", "window")
        }
    assert set(fusion.CODECS) <= set(fusion.ROUNDED)


@pytest.mark.parametrize("policy", sorted(CODEC_OF))
def test_a_batch_travels_in_the_policy_codec(ray_session, pool, tables, policy) -> None:
    ids, x = fusion.make_rows(*pool, 0, 10)
    batch = FusedBatch(ids, np.zeros((10, 2), np.float32), x)
    codec = Ladder(tables).get(fusion.POLICIES[policy]["codec"])
    ref = ray.put(tables)
    wire = fusion.on_the_wire(batch, codec, ref)
    assert wire.payload.codec == CODEC_OF[policy]
    assert wire.payload.nbytes == codec.bytes_per_row * 10 < 4 * D * 10
    assert (wire.tables is ref) == (
        CODEC_OF[policy] == "sparse"
    )  # only a table codec names the tables


@pytest.mark.parametrize("policy", sorted(CODEC_OF))
def test_the_shard_stores_what_the_policy_codec_decodes(
    ray_session, tmp_path, pool, tables, policy
) -> None:
    cfg = Config(data_dir=tmp_path, faiss_threads=1)
    shard = ray.remote(ShardReplica).remote(0, tmp_path / "shard", cfg, [])
    try:
        p = fusion.POLICIES[policy]
        out = fusion.Replayer(*pool, tables).run_fixed(
            shard, p["rows"], p["age"], p["window"], 0.3, codec=p["codec"]
        )
        assert out["made"] >= fusion.FRAMES_PER_SOURCE
        codec = Ladder(tables).get(p["codec"])
        ids, x = fusion.make_rows(*pool, 0, fusion.FRAMES_PER_SOURCE)  # all of video 1
        assert (ids >> FRAME_BITS == 1).all()
        sent = codec.decode(codec.encode(x))
        for space, (lo, hi) in (("visual", (0, VISUAL_DIM)), ("semantic", (VISUAL_DIM, D))):
            _, held = ray.get(shard.frames.remote(space, 1, -1.0, 1.0))
            np.testing.assert_allclose(held, sent[:, lo:hi], rtol=0, atol=1e-6)
            assert not np.allclose(held, x[:, lo:hi], rtol=0, atol=1e-6)  # not the fp32 rows
    finally:
        ray.kill(shard)


def test_sparse_keep_is_checked_as_config_checks_it() -> None:
    assert fusion._keep("0.3,0.6") == (0.3, 0.6)
    assert fusion._keep("0.5") == (0.5, 0.5)
    with pytest.raises(ValueError, match="codec_sparse_keep"):
        fusion._keep("0.5,1.5")


def test_best_codec_in_the_squeeze_is_the_fastest_that_keeps_recall() -> None:
    recall = {"5": 1.0, "6": 0.995, "7": 0.97}
    policies = {
        c: {"recall_video_at_10": {"visual": r, "semantic": 1.0}} for c, r in recall.items()
    }
    assert fusion._best_codec(policies, {"4": 900.0, "5": 300.0, "6": 500.0, "7": 800.0}) == "6"
    assert fusion._best_codec({"7": policies["7"]}, {"4": 900.0, "7": 800.0}) is None
