"""A shard of the running service dies (SIGKILL of its process): searches through the API
keep answering, never a 5xx (partial, naming the shard, while no replica of it answers; or
held for the moment Ray takes to restart it); the shard comes back from its snapshot and log
with every vector."""

from __future__ import annotations

import os
import signal
import time

import ray

from vifusion.cluster.actors import actor_name


def shard_pids(cfg) -> list[int]:
    """The processes of the service's own shard replicas (other tests' may be alive too)."""
    ours = {
        actor_name(cfg, "shard", n, r)
        for n in range(cfg.num_shards)
        for r in range(cfg.shard_replicas)
    }
    return sorted(
        a["Pid"]
        for a in ray._private.state.actors().values()
        if a["Name"] in ours and a["State"] == "ALIVE"
    )


def test_a_killed_shard_never_fails_a_search_and_comes_back_whole(live):
    pids = shard_pids(live.cfg)
    assert len(pids) == live.cfg.num_shards  # the service's shards, one replica each
    os.kill(pids[0], signal.SIGKILL)
    deadline = time.monotonic() + 120
    while True:
        r = live.client.post("/v1/search", json={"text": "a cat", "top_k": 3})
        assert r.status_code == 200, r.text  # never a 5xx, whatever the shards do
        body = r.json()
        assert len(body["missing_shards"]) <= 1 and body["partial"] == bool(body["missing_shards"])
        back = live.anon.get("/healthz").json()["vectors"] == live.vectors
        if back and not body["partial"] and len(shard_pids(live.cfg)) == live.cfg.num_shards:
            break
        assert time.monotonic() < deadline, "the shard never came back"
        time.sleep(0.2)
    assert pids[0] not in shard_pids(
        live.cfg
    )  # a new process: Ray restarted it, from snapshot + log
