"""Several ShardSets on one data dir (API replicas, the ingest pool) share one set of shard
replicas: the second attaches instead of starting copies over the same files."""

from __future__ import annotations

from pathlib import Path

import pytest

from vifusion.cluster.actors import actor_name, find_actor
from vifusion.config import Config
from vifusion.index.router import ShardSet

from ._helpers import make_batch


def _vectors(shards: ShardSet) -> list[int]:
    return [s["vectors"]["visual"] for s in shards.stats()]


@pytest.mark.slow
@pytest.mark.parametrize("shared", [False, True])
def test_a_second_shardset_attaches_to_the_running_replicas(
    ray_session, tmp_path: Path, shared: bool
) -> None:
    ray = ray_session
    cfg = Config(data_dir=tmp_path, num_shards=2, shard_replicas=2, shared_actors=shared)
    first = ShardSet(cfg)
    try:
        second = ShardSet(cfg)
        assert [[h._actor_id for h in g] for g in second.replicas] == [
            [h._actor_id for h in g] for g in first.replicas
        ]
        ray.get(second.handle_for(10).add.remote(make_batch(10, 8, seed=1)))
        assert _vectors(first) == [8, 0]  # one copy of the data, seen through either
        second.close()  # the attached set lets go; the replicas keep serving the first
        assert _vectors(first) == [8, 0]
    finally:
        if shared:
            first.close()
            assert find_actor(actor_name(cfg, "shard", 0, 0)) is not None  # outlives it
            ShardSet(cfg).shutdown()
        else:
            first.close()
    assert find_actor(actor_name(cfg, "shard", 0, 0)) is None
    reopened = ShardSet(cfg)  # the names are free again: fresh replicas, from disk
    try:
        assert _vectors(reopened) == [8, 0]
    finally:
        reopened.close()


def test_data_dirs_do_not_share_replicas(ray_session, tmp_path: Path) -> None:
    a = ShardSet(Config(data_dir=tmp_path / "a", num_shards=1))
    b = ShardSet(Config(data_dir=tmp_path / "b", num_shards=1))
    try:
        assert a.handles[0]._actor_id != b.handles[0]._actor_id
    finally:
        a.close()
        b.close()
