import pytest
import ray

from vifusion.placement import (
    extractor_options,
    extractors_a_node,
    planned_api_replicas,
    planned_codec_floors,
    shard_nodes,
    shard_resources,
    shard_strategies,
    shard_strategy,
    spread,
)


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
