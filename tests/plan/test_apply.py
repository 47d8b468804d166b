"""An applied plan places each actor where it says: a two-host bed, a plan that puts the
extractors and one shard where the static rules would not, and Ray's state API after the
runtime started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.netbed import NetBed, available
from vifusion._cores import usable_cores
from vifusion.cluster.placement import planned_extractors, planned_shard_strategies
from vifusion.config import Config
from vifusion.runtime import RAY_TUNED

pytestmark = pytest.mark.netbed
ROOT = Path(__file__).resolve().parents[2]

# Runs in host 0: applies the plan, starts the runtime, says where each actor runs.
DRIVER = r"""
import json, sys
from pathlib import Path
import ray
from ray.util.state import list_actors
from vifusion.config import Config
from vifusion.plan.hardware import from_ray
from vifusion.plan.planner import apply
from vifusion.runtime import Runtime

address, data, plan = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
ray.init(address=address, log_to_driver=False)
cluster, live = from_ray()
# the plan names the worker host by IP, as `vifusion plan --address` writes it
worker = next(n for n in live if n.type.name != "head")
for node in plan["nodes"]:
    node["ip"] = worker.ip if node["name"] == "worker" else None
apply(Config(data_dir=data), plan)
cfg = Config(data_dir=data, ray_address=address, num_extractors=1, num_shards=2, speech=False, screen_text=False)
with Runtime(cfg, writer=True) as rt:
    ray.get([e.device.remote() for e in rt.indexer.extractors])
    threads = lambda _: __import__("torch").get_num_threads()
    out_threads = ray.get([e.__ray_call__.remote(threads) for e in rt.indexer.extractors])
    node_ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    out = {}
    for a in list_actors(address=address, filters=[("state", "=", "ALIVE")], limit=1000, detail=True):
        out.setdefault(a.class_name, []).append(node_ips.get(a.node_id))
    out["head"] = next(n.ip for n in live if n.type.name == "head")
    out["worker"] = worker.ip
    out["threads"] = out_threads
print("RESULT " + json.dumps(out))
"""


def test_a_plan_that_cannot_be_resolved_is_not_used(ray_session):
    plan = {
        "nodes": [{"name": "gone", "ip": "192.0.2.1", "extractors": 2, "signature": [2, 0, 0, 0]}],
        "shards": [["gone"], ["gone"]],
    }
    assert planned_extractors(plan) is None
    assert planned_shard_strategies(plan, 2, 1) is None
    assert (
        planned_shard_strategies({**plan, "shards": [["gone"]]}, 2, 1) is None
    )  # another shard count


@pytest.mark.slow
def test_an_applied_plan_puts_every_extractor_and_shard_where_it_says(tmp_path):
    if (reason := available(delay=False)) is not None:
        pytest.skip(reason)
    # Static placement would put an extractor on any node and the shards round-robin over
    # both; the plan puts two extractors on the worker and both shards on the head.
    plan = {
        "version": 1,
        "nodes": [
            {
                "name": "head-0",
                "type": "head",
                "head": True,
                "ip": None,
                "signature": [2, 0, 0, 0],
                "extractors": 0,
            },
            {
                "name": "worker",
                "type": "w",
                "head": False,
                "ip": None,
                "signature": [2, 0, 0, 0],
                "extractors": 2,
            },
        ],
        "shards": [["head-0"], ["head-0"]],
        "fusion_min_bytes": 128 << 10,
        "fusion_max_bytes": 4 << 20,
    }
    with NetBed(hosts=2, rate="1gbit") as bed:
        address = bed.start_ray(num_cpus=2, dashboard=True, env=RAY_TUNED)
        proc = bed.exec(
            0,
            [sys.executable, "-c", DRIVER, address, str(tmp_path / "data"), json.dumps(plan)],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(ROOT),
        )
        out, err = proc.communicate(timeout=600)
    line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, err[-3000:]
    got = json.loads(line[7:])
    assert got["Extractor"] == [got["worker"], got["worker"]]  # two, though num_extractors is 1
    # and they split the worker's cores for torch, rather than each spinning a thread a core
    assert got["threads"] == [max(1, usable_cores() // 2)] * 2
    assert set(got["ShardReplica"]) == {got["head"]}
    assert sorted(got["Aggregator"]) == sorted([got["head"], got["worker"]])
    assert Config(data_dir=tmp_path / "data").use_plan
