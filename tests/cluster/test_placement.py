import json
import logging
from pathlib import Path

import pytest
import ray

from tests.plan.test_follow import CLUSTER, COSTS
from vifusion.cluster.placement import (
    PLAN_FILE,
    applied_plan,
    extractor_options,
    extractors_a_node,
    planned_api_replicas,
    planned_codec_floors,
    planned_extractors,
    shard_nodes,
    shard_resources,
    shard_strategies,
    shard_strategy,
    spread,
)
from vifusion.config import Config
from vifusion.plan.planner import apply, make_plan


def test_primaries_spread_over_nodes_and_replicas_of_a_shard_never_share_one():
    nodes = ["a", "b", "c"]
    layout = spread(num_shards=3, replicas=2, nodes=nodes)
    assert [group[0] for group in layout] == ["a", "b", "c"]  # one primary per node
    assert all(len(set(group)) == 2 for group in layout)
    # every node holds the same number of replicas
    assert sorted(node for group in layout for node in group) == ["a", "a", "b", "b", "c", "c"]


def test_more_replicas_than_nodes_wrap_around():
    assert spread(num_shards=2, replicas=3, nodes=["a", "b"]) == [["a", "b", "a"], ["b", "a", "b"]]


def test_no_node_is_an_error():
    with pytest.raises(ValueError, match="no node"):
        spread(1, 1, [])


def test_on_a_cpu_only_node_shards_go_to_it_and_extractors_ask_for_no_gpu(ray_session):
    assert shard_nodes() == [ray.get_runtime_context().get_node_id()]
    assert extractor_options(2) == {"num_cpus": 1}


def test_on_one_machine_every_unplanned_extractor_shares_its_node(ray_session):
    # each then takes its share of the cores for torch (extract/actor.py)
    assert [extractors_a_node(n) for n in (1, 2, 3)] == [1, 2, 3]


def test_a_shard_replica_whose_node_is_gone_runs_on_another_and_a_live_node_keeps_it(
    ray_session,
):
    """The rule that lets Ray re-create a replica after its node is lost: the affinity is soft.
    A node that is not there (as a lost node is not) does not stop the replica; a live one
    holds it (never spilled elsewhere)."""
    here = ray.get_runtime_context().get_node_id()
    [[strategy]] = shard_strategies(1, 1)
    assert strategy.node_id == here and strategy.soft and not strategy._spill_on_unavailable
    assert shard_resources() == {}  # no node carries the shard resource: any node will do

    @ray.remote(num_cpus=0)
    def node() -> str:
        return ray.get_runtime_context().get_node_id()

    lost = shard_strategy("ab" * 28)  # a node id no live node has
    assert ray.get(node.options(scheduling_strategy=lost).remote(), timeout=60) == here
    assert ray.get(node.options(scheduling_strategy=strategy).remote(), timeout=60) == here


def test_a_plans_codec_floors_reach_their_nodes_and_an_unknown_codec_is_ignored(
    ray_session, caplog
):
    head = ray.get_runtime_context().get_node_id()
    plan = {"nodes": [{"name": "head-0", "head": True, "codec_floor": "fp16"}]}
    assert planned_codec_floors(plan) == {head: "fp16"}
    plan["nodes"][0]["codec_floor"] = "pq"  # needs tables a node may not hold
    assert planned_codec_floors(plan) == {}
    assert "codec floor 'pq' is not one of" in caplog.text
    assert planned_codec_floors(None) == {}


def test_a_plans_api_replicas_run_only_where_replicas_share_the_shards(caplog):
    assert planned_api_replicas({"api_replicas": 3}, 1, shared_actors=True) == 3
    assert planned_api_replicas(None, 2, shared_actors=True) == 2  # no plan: the configured
    assert planned_api_replicas({"api_replicas": 1}, 2, shared_actors=True) == 2  # the least
    assert planned_api_replicas({"api_replicas": 3}, 1, shared_actors=False) == 1
    assert "API replicas need shared_actors" in caplog.text


@pytest.fixture(scope="module")
def plan() -> dict:
    """A plan as ``vifusion plan`` makes it (version 2: nodes, shards, fusion limits, API
    replicas, the cluster and costs it was made for), as JSON gives it back."""
    cfg = Config(data_dir=Path("unused"), plan_video_mbps=0)
    return json.loads(json.dumps(make_plan(cfg, CLUSTER, COSTS, parallel=False)[1]))


def test_a_valid_plan_is_placed_by(tmp_path, plan, caplog):
    cfg = Config(data_dir=tmp_path)
    apply(cfg, plan)
    assert applied_plan(cfg) == plan
    assert planned_api_replicas(applied_plan(cfg), 1, shared_actors=True) == plan["api_replicas"]
    assert not caplog.records


def _without(plan: dict, *keys: str) -> dict:
    return {k: v for k, v in plan.items() if k not in keys}


def _node(plan: dict, **change) -> dict:
    return {**plan, "nodes": [{**plan["nodes"][0], **change}, *plan["nodes"][1:]]}


@pytest.mark.parametrize(
    ("broken", "reason"),
    [
        (lambda p: json.dumps(p)[: len(json.dumps(p)) // 2], "not JSON"),  # cut short
        (lambda p: "", "not JSON"),
        (lambda p: _without(p, "fusion_min_bytes", "fusion_max_bytes"), "fusion_min_bytes: Field"),
        (lambda p: {**p, "api_replicas": 100000}, "api_replicas 100000 is over 4"),
        (lambda p: {**p, "fusion_max_bytes": 1 << 40}, "fusion_max_bytes: Input should be less"),
        (lambda p: {**p, "fusion_min_bytes": 9 << 20}, "fusion_min_bytes 9437184 is over"),
        (lambda p: {**p, "predicted_fps": float("nan")}, "predicted_fps: Input should be a finite"),
        (lambda p: _node(p, extractors=-1), "nodes.0.extractors: Input should be greater"),
        (lambda p: _node(p, extractors="2"), "nodes.0.extractors: Input should be a valid integer"),
        (lambda p: _node(p, ip="not an address"), "nodes.0.ip: Value error"),
        (lambda p: {**p, "shards": [["nowhere"]]}, "shards.0: no node named 'nowhere'"),
        (lambda p: {**p, "version": 99}, "version: Input should be less than or equal to 2"),
        (lambda p: [p], "the plan: Input should be a valid dictionary"),
    ],
)
def test_a_plan_the_runtime_cannot_place_by_is_logged_once_and_not_used(
    tmp_path, plan, caplog, broken, reason
):
    """It kept `serve` from starting (cut short), failed every job (no fusion limits), or
    was followed whatever it said (100000 API replicas): now the service runs unplanned."""
    cfg = Config(data_dir=tmp_path)
    doc = broken(plan)
    (tmp_path / PLAN_FILE).write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with caplog.at_level(logging.ERROR, logger="vifusion.cluster.placement"):
        assert applied_plan(cfg) is None
        assert applied_plan(cfg) is None  # read again, by another part: not logged again
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"{tmp_path / PLAN_FILE} is not used, the service runs unplanned: ")
    assert reason in line, line
    assert "\n" not in line
    assert planned_api_replicas(applied_plan(cfg), cfg.api_replicas, cfg.shared_actors) == 1
    assert planned_extractors(applied_plan(cfg)) is None
