"""A shard of the running service dies (SIGKILL of its process): searches through the API
keep answering, flagged partial with the missing shard named, never a 5xx; Ray restarts the
shard from its snapshot and log, and the answers are whole again with every vector."""

from __future__ import annotations

import os
import signal
import time

import ray


def shard_pids() -> list[int]:
    return sorted(a["Pid"] for a in ray._private.state.actors().values()
                  if a["ActorClassName"] == "ShardReplica" and a["State"] == "ALIVE")


def test_a_killed_shard_makes_answers_partial_until_it_is_back_whole(live):
    pids = shard_pids()
    assert len(pids) == live.cfg.num_shards  # the service's shards, one replica each
    os.kill(pids[0], signal.SIGKILL)
    seen: list[dict] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        r = live.client.post("/v1/search", json={"text": "a cat", "top_k": 3})
        assert r.status_code == 200, r.text  # never a 5xx, whatever the shards do
        body = r.json()
        seen.append(body)
        if any(b["partial"] for b in seen) and not body["partial"]:
            break  # it was partial, and now it is whole again
        time.sleep(0.2)
    partial = [b for b in seen if b["partial"]]
    assert partial, "no answer showed the shard missing"
    assert {tuple(b["missing_shards"]) for b in partial} == {(partial[0]["missing_shards"][0],)}
    assert not seen[-1]["partial"], "the shard never came back"
    assert live.anon.get("/healthz").json()["vectors"] == live.vectors  # every vector back
