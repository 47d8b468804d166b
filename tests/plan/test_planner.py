"""What a plan is ranked on: a steady stream of videos, or a batch whose last video counts."""

from vifusion.config import Config
from vifusion.plan.hardware import Cluster, NodeType
from vifusion.plan.planner import make_plan, report_lines, videos_of, workload
from vifusion.plan.terms import StageCosts

# A node with a tenth of the others' cores: an extractor there takes ten times as long over
# a video, and in a batch the video it holds can end the batch long after the rest.
CLUSTER = Cluster(
    (NodeType("head", 1, 2), NodeType("mid", 1, 2), NodeType("weak", 1, 2, cpu_share=0.05)),
    "head",
)
COSTS = {t.name: StageCosts(decode_cs=0.005, embed_cs=0.03) for t in CLUSTER.types}
VIDEOS = {"sample_fps": 4.0, "plan_video_s": 12.0, "plan_video_mbps": 0.0}


def weak_extractors(plan: dict) -> int:
    return sum(n["extractors"] for n in plan["nodes"] if n["type"] == "weak")


def test_a_batch_is_planned_around_a_node_that_would_hold_up_its_last_videos(tmp_path):
    batch = Config(data_dir=tmp_path, plan_batch_videos=12, **VIDEOS)
    report, plan = make_plan(batch, CLUSTER, COSTS, parallel=False)
    assert weak_extractors(plan) == 0
    assert report.best.result.fps >= 1.3 * report.even.result.fps  # the even spread waits
    assert report.best.result.frames == 12 * 48  # the whole batch, the last video included

    # In a stream without end, an extractor on the weak node only adds frames.
    stream = Config(data_dir=tmp_path, **VIDEOS)
    assert weak_extractors(make_plan(stream, CLUSTER, COSTS, parallel=False)[1]) > 0


def test_a_plan_records_the_videos_it_was_made_for_and_a_replan_plans_for_them(tmp_path):
    made = Config(data_dir=tmp_path, plan_batch_videos=12, **VIDEOS)
    _, plan = make_plan(made, CLUSTER, COSTS, parallel=False)
    again = videos_of(Config(data_dir=tmp_path, sample_fps=4.0), plan)  # the same sampling
    assert workload(again) == workload(made)
    # A plan from before the batch was recorded gave only the videos' bitrate.
    assert videos_of(Config(), {"video_mbps": 2.5}).plan_video_mbps == 2.5


def test_a_plan_names_the_codec_floor_of_each_node_behind_a_narrow_uplink(tmp_path):
    far = NodeType("far", 3, 2, uplink=0.4e6 / 8, downlink=1e9 / 8, rtt_s=0.01)
    cluster = Cluster((NodeType("head", 1, 2, cpu_share=0.3), far), "head")
    costs = {t: StageCosts(decode_cs=0.005, embed_cs=0.03) for t in ("head", "far")}
    report, plan = make_plan(Config(data_dir=tmp_path, **VIDEOS), cluster, costs, parallel=False)
    floors = {n["name"]: n.get("codec_floor") for n in plan["nodes"]}
    c = report.best.candidate
    # by name, where the aggregator reads it (``placement.planned_codec_floors``)
    assert floors == {
        n.name: ("fp32", "fp16", "int8")[c.floor(i)] if c.floor(i) else None
        for i, n in enumerate(cluster.nodes())
    }
    (floor,) = set(floors.values()) - {None}  # one floor, on far nodes only
    assert floors["head-0"] is None
    assert f"codec floor {floor} from far" in report_lines(cluster, report)[0]


def test_a_plan_adds_api_replicas_where_searches_wait_and_the_deployment_runs_them(tmp_path):
    from serve.app import replicas
    from vifusion.plan.planner import apply

    # Every search waits a 4 s round trip on a far shard (the head has no memory for both):
    # one replica answers at most 8 a second, and 12 come.
    cluster = Cluster(
        (
            NodeType("head", 1, 2, memory_bytes=580 << 20, rtt_s=4.0),
            NodeType("far", 1, 2, rtt_s=4.0),
        ),
        "head",
    )
    costs = {
        t: StageCosts(
            decode_cs=0.02, embed_cs=0.04, query_cs=1e-3, search_cs=1e-3, extractor_bytes=20 << 20
        )
        for t in ("head", "far")
    }
    searched = {
        **VIDEOS,
        "plan_video_s": 100.0,
        "plan_batch_videos": 10,
        "plan_queries_per_s": 12,
        "plan_index_rows": 4000,
        "plan_query_p50_s": 6.0,
    }
    shared = Config(data_dir=tmp_path, shared_actors=True, **searched)
    report, plan = make_plan(shared, cluster, costs, parallel=False)
    assert plan["api_replicas"] == 2
    assert "| 2 API replicas |" in report_lines(cluster, report)[0]
    apply(shared, plan)
    scaling = replicas(shared)._deployment_config.autoscaling_config
    assert (scaling.min_replicas, scaling.max_replicas) == (2, 4)
    ignored = replicas(shared.updated({"use_plan": False}))._deployment_config
    assert ignored.autoscaling_config is None  # one replica, as configured

    # Replicas that own their shards cannot be more than one: the plan keeps one.
    alone = Config(data_dir=tmp_path / "alone", **searched)
    assert make_plan(alone, cluster, costs, parallel=False)[1]["api_replicas"] == 1
