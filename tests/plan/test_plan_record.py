"""plan.json records what it was made for (the cluster, the stage costs), so that the service
can make it again for a changed link; a plan from before that is still read."""

import json
from pathlib import Path

import pytest

from vifusion.cluster.placement import load_plan
from vifusion.config import Config
from vifusion.plan.hardware import Cluster, NodeType, from_yaml, path
from vifusion.plan.planner import VERSION, apply, made_for, make_plan
from vifusion.plan.terms import StageCosts

ROOT = Path(__file__).resolve().parents[2]
MBIT = 1e6 / 8  # bytes/s


def test_a_cluster_goes_through_json_and_back_unchanged():
    cluster = from_yaml(ROOT / "deploy" / "cluster.yaml").with_link("shard_mem", "20mbit", 10)
    assert any(t.resources for t in cluster.types)  # resources, rates and the head all travel
    assert Cluster.from_dict(json.loads(json.dumps(cluster.to_dict()))) == cluster


def test_an_applied_plan_records_its_cluster_and_stage_costs(tmp_path):
    cfg = Config(data_dir=tmp_path)
    cluster = Cluster(
        (NodeType("head", 1, 2), NodeType("far", 2, 4, uplink=20 * MBIT, rtt_s=0.01)), "head"
    )
    costs = {
        "head": StageCosts(decode_cs=0.005, embed_cs=0.03),
        "far": StageCosts(decode_cs=0.004, embed_cs=0.02, embed_cs_crowded=0.05),
    }
    _, plan = make_plan(cfg, cluster, costs, parallel=False)
    apply(cfg, plan)
    read = load_plan(tmp_path)
    assert read["version"] == VERSION
    assert made_for(read) == (cluster, costs)


def test_a_plan_from_before_the_record_is_read_but_cannot_be_made_again(tmp_path):
    old = {
        "version": 1,
        "nodes": [{"name": "head-0", "type": "head", "head": True, "ip": None, "extractors": 1}],
        "shards": [["head-0"], ["head-0"]],
        "fusion_min_bytes": 64 << 10,
        "fusion_max_bytes": 8 << 20,
        "predicted_fps": 12.0,
    }
    (tmp_path / "plan.json").write_text(json.dumps(old))
    assert load_plan(tmp_path) == old
    assert made_for(old) is None


@pytest.mark.parametrize(
    ("up", "down", "measured", "want"),
    [
        (20, 1000, 10, (10, 1000)),  # the sender's uplink bounds the path: it is what changed
        (1000, 20, 10, (1000, 10)),  # the receiver's downlink bounds it
        (20, 30, 50, (50, 50)),  # faster than both: the other side cannot be below it either
    ],
)
def test_a_measured_path_rate_sets_the_access_link_that_bounds_the_path(up, down, measured, want):
    cluster = Cluster(
        (NodeType("a", 1, 2, uplink=up * MBIT), NodeType("b", 1, 2, downlink=down * MBIT)), "a"
    )
    changed = cluster.with_path_rate("a", "b", measured * MBIT)
    assert (changed.type("a").uplink, changed.type("b").downlink) == (
        pytest.approx(want[0] * MBIT),
        pytest.approx(want[1] * MBIT),
    )
    assert path(changed.type("a"), changed.type("b"))[0] == pytest.approx(measured * MBIT)
    assert changed.type("a").downlink == cluster.type("a").downlink  # the other way: as it was
