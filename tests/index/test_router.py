from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vifusion.config import Config
from vifusion.index.router import ShardSet, shard_dir, shard_for
from vifusion.index.shard import Shard
from vifusion.types import FRAME_BITS, FusedBatch

from ._helpers import make_batch, unit

VIDEOS = (10, 11, 12, 13)  # shards 0, 1, 0, 1


def test_shard_for_is_stable_and_in_range() -> None:
    assert [shard_for(v, 2) for v in VIDEOS] == [0, 1, 0, 1]
    assert all(0 <= shard_for(v, 3) < 3 for v in range(100))
    with pytest.raises(ValueError):
        shard_for(1, 0)


@pytest.fixture
def cfg(tmp_path: Path) -> Config:
    return Config(data_dir=tmp_path, num_shards=2, faiss_threads=1)


def _fill(shards: ShardSet) -> None:
    import ray

    ray.get([shards.handle_for(v).add.remote(make_batch(v, 8, seed=v)) for v in VIDEOS])


def test_shardset_routes_searches_and_reloads(ray_session, cfg: Config) -> None:
    ray = ray_session
    shards = ShardSet(cfg)
    try:
        assert len(shards.handles) == 2
        _fill(shards)
        stats = shards.stats()
        assert [s["shard"] for s in stats] == [0, 1]
        assert [s["vectors"] for s in stats] == [
            {"visual": 16, "semantic": 16, "speech": 0, "screen": 0}
        ] * 2
        assert ray.get([h.video_ids.remote() for h in shards.handles]) == [[10, 12], [11, 13]]

        # Each query is an exact frame from a different shard; the merge must find both.
        q = np.stack(
            [
                make_batch(11, 8, seed=11).space("visual")[3],
                make_batch(12, 8, seed=12).space("visual")[5],
            ]
        )
        results = shards.search("visual", q, 20)
        assert len(results) == 2
        assert (results[0][0].video_id, results[0][0].t_start) == (11, 3.0)
        assert (results[1][0].video_id, results[1][0].t_start) == (12, 5.0)
        assert results[0][0].score == pytest.approx(1.0, abs=1e-5)
        assert {h.video_id for h in results[0]} == set(VIDEOS)  # hits come from both shards
        for hits in results:
            assert len(hits) == 20
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)

        # The fan-out equals one shard holding everything.
        whole = Shard(9, cfg.data_dir / "whole", cfg)
        for v in VIDEOS:
            whole.add(make_batch(v, 8, seed=v))
        rq = unit(np.random.default_rng(1), 3, 384)
        scores, ids, _ = whole.search("semantic", rq, 12)
        for qi, hits in enumerate(shards.search("semantic", rq, 12)):
            assert [h.video_id for h in hits] == (ids[qi] >> FRAME_BITS).tolist()
            np.testing.assert_allclose([h.score for h in hits], scores[qi], rtol=1e-6)

        assert shards.delete_video(12) == 8
        assert all(h.video_id != 12 for hits in shards.search("visual", q, 32) for h in hits)

        shards.snapshot()
        late = make_batch(10, 3, seed=99, first_frame=100)
        ray.get(shards.handle_for(10).add.remote(late))  # acknowledged after the snapshot
        before = shards.search("semantic", rq, 10)
        probe = shards.search("visual", late.space("visual"), 1)
        assert [hits[0].t_start for hits in probe] == [100.0, 101.0, 102.0]
    finally:
        shards.close()  # a kill: no snapshot on the way out
    assert (shard_dir(cfg.data_dir, 0) / "snapshot.npz").exists()

    reopened = ShardSet(cfg)
    try:
        assert [s["vectors"]["visual"] for s in reopened.stats()] == [11, 16]
        assert reopened.search("semantic", rq, 10) == before
        probe = reopened.search("visual", late.space("visual"), 1)
        assert [hits[0].t_start for hits in probe] == [100.0, 101.0, 102.0]
    finally:
        reopened.close()


def test_snapshot_selected_shards_only(ray_session, cfg: Config) -> None:
    shards = ShardSet(cfg)
    try:
        _fill(shards)
        shards.snapshot([1])
        with pytest.raises(ValueError, match="no shard 2"):
            shards.snapshot([2])
    finally:
        shards.close()
    assert not (shard_dir(cfg.data_dir, 0) / "snapshot.npz").exists()
    assert (shard_dir(cfg.data_dir, 1) / "snapshot.npz").exists()
    reopened = ShardSet(cfg)
    try:
        assert [s["videos"] for s in reopened.stats()] == [2, 2]  # shard 0 from its log alone
    finally:
        reopened.close()


def test_concurrent_searches_are_batched_and_split_back_exactly(ray_session, cfg: Config) -> None:
    from concurrent.futures import ThreadPoolExecutor

    plain = Config(data_dir=cfg.data_dir, num_shards=2, faiss_threads=1, query_fusion=False)
    queries = unit(np.random.default_rng(3), 64, 384)
    ks = [1 + i % 12 for i in range(64)]
    shards = ShardSet(plain)
    try:
        _fill(shards)
        expected = [shards.search("semantic", queries[[i]], ks[i])[0] for i in range(64)]
    finally:
        shards.close()
    shards = ShardSet(cfg)
    try:
        with ThreadPoolExecutor(16) as pool:
            got = list(
                pool.map(lambda i: shards.search("semantic", queries[[i]], ks[i])[0], range(64))
            )
        assert got == expected
        assert shards.batched_calls["semantic"] < 64  # queries shared calls
    finally:
        shards.close()


def test_search_rejects_bad_requests_before_fan_out(ray_session, cfg: Config) -> None:
    shards = ShardSet(cfg)
    try:
        with pytest.raises(ValueError, match="unknown space"):
            shards.search("audio", np.zeros((1, 384), np.float32), 3)
        with pytest.raises(ValueError, match=r"\(nq, 1280\)"):
            shards.search("visual", np.zeros((1, 384), np.float32), 3)
        assert shards.search("visual", np.zeros((2, 1280), np.float32), 3) == [[], []]
    finally:
        shards.close()


def test_bad_snapshot_fails_at_start(ray_session, cfg: Config) -> None:
    d = shard_dir(cfg.data_dir, 1)
    d.mkdir(parents=True)
    (d / "snapshot.npz").write_bytes(b"not a snapshot")
    with pytest.raises(ray_session.exceptions.RayActorError, match="not a shard snapshot"):
        ShardSet(cfg)


def test_closed_set_refuses_search(ray_session, cfg: Config) -> None:
    shards = ShardSet(cfg)
    shards.close()
    with pytest.raises(RuntimeError, match="closed"):
        shards.search("semantic", np.zeros((1, 384), np.float32), 3)


def test_a_data_dir_refuses_another_shard_count(ray_session, tmp_path):
    ShardSet(Config(data_dir=tmp_path, num_shards=2)).close()
    with pytest.raises(ValueError, match="built with 2 shards"):
        ShardSet(Config(data_dir=tmp_path, num_shards=3))
    ShardSet(Config(data_dir=tmp_path, num_shards=2)).close()  # the same count still opens


@pytest.mark.parametrize("fused", [True, False], ids=["batched", "one-call-each"])
def test_speech_and_screen_rows_are_searched_across_shards(
    ray_session, cfg: Config, fused: bool
) -> None:
    """Text rows reach a video's shard with its frames, and each text space is searched
    across the shards like the frame spaces, whole or restricted to videos; a hit names its
    row, the key of its words in the catalog."""
    from concurrent.futures import ThreadPoolExecutor

    rows = {
        (v, kind): FusedBatch.of_texts(
            v,
            kind,
            0,
            np.array([[3.0 * i, 3.0 * i + 2] for i in range(5)]),
            unit(np.random.default_rng(100 * v + len(kind)), 5, 384),
        )
        for v in VIDEOS
        for kind in ("speech", "screen")
    }
    shards = ShardSet(cfg.model_copy(update={"query_fusion": fused}))
    try:
        ray_session.get(
            [
                shards.handle_for(v).add.remote(
                    FusedBatch.concat(
                        [make_batch(v, 8, seed=v), rows[v, "speech"], rows[v, "screen"]]
                    )
                )
                for v in VIDEOS
            ]
        )
        held = {"visual": 16, "semantic": 16, "speech": 10, "screen": 10}
        assert [s["vectors"] for s in shards.stats()] == [held] * 2
        for kind in ("speech", "screen"):
            q = np.stack([rows[11, kind].space("semantic")[2], rows[12, kind].space("semantic")[4]])
            # concurrent: batched into shared calls where query batching is on
            with ThreadPoolExecutor(4) as pool:
                found = list(
                    pool.map(lambda _, kind=kind, q=q: shards.search(kind, q, 30), range(4))
                )
            for hits in found:
                assert [(h[0].video_id, h[0].row, h[0].t_start, h[0].t_end) for h in hits] == [
                    (11, 2, 6.0, 8.0),
                    (12, 4, 12.0, 14.0),
                ]
                assert [len(h) for h in hits] == [
                    20,
                    20,
                ] and not hits.missing  # all of the space's rows, only those
            mine = shards.search(kind, q, 30, videos=[12, 13])
            assert [{h.video_id for h in hits} for hits in mine] == [{12, 13}] * 2
        assert (shards.batched_calls["speech"] > 0) == fused
        assert shards.delete_video(11) == 8 + 5 + 5
        for kind in ("speech", "screen"):
            assert all(h.video_id != 11 for hits in shards.search(kind, q, 30) for h in hits)
    finally:
        shards.close()
