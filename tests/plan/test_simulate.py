"""The simulator against cases whose answer is known in closed form."""

import pytest

from vifusion.comm.codec import Ladder
from vifusion.plan.hardware import RAY_CORES, Cluster, NodeType
from vifusion.plan.simulate import Simulation, simulate
from vifusion.plan.terms import Candidate, StageCosts, Workload

ROW_WIRE = 6656 + 16  # an fp32 row and its id and times
WIRE_BYTES = {c.name: c.bytes_per_row for c in Ladder().codecs}
FREE = dict(aggregate_cs=0.0, encode_cs=(0.0,), apply_cs=0.0, message_cs=0.0, sync_s=0.0)


def one_node(cores: float, share: float = 1.0) -> Cluster:
    return Cluster((NodeType("head", 1, cores, cpu_share=share),), "head")


@pytest.mark.parametrize(("cores", "share"), [(1, 1.0), (4, 1.0), (4, 0.5)])
def test_one_stage_bound_runs_at_the_rate_its_cores_allow(cores, share):
    # Embedding bounds it: every core the node may use (Ray's own processes take RAY_CORES of
    # them) embeds, at embed_cs core-seconds a frame.
    costs = {"head": StageCosts(decode_cs=0.001, embed_cs=0.05, **FREE)}
    r = simulate(
        one_node(cores, share),
        costs,
        Candidate((1,), ((0,),)),
        Workload(videos=4, frames_per_video=512),
    )
    assert r.fps == pytest.approx((cores * share - RAY_CORES) / 0.051, rel=0.03)


def test_decoding_on_one_thread_bounds_an_extractor_with_cores_to_spare():
    costs = {"head": StageCosts(decode_cs=0.02, embed_cs=0.001, **FREE)}
    r = simulate(
        one_node(8), costs, Candidate((1,), ((0,),)), Workload(videos=4, frames_per_video=512)
    )
    assert r.fps == pytest.approx(1 / 0.02, rel=0.03)


@pytest.mark.parametrize("mbit", [5, 20])
def test_one_link_bound_runs_at_its_bytes_per_s_over_the_bytes_of_a_frame(mbit):
    # Fast extractors on a node whose uplink is slow; the shard on the other node.
    src = NodeType("src", 1, 16, uplink=mbit * 1e6 / 8, downlink=1e9, rtt_s=0.01)
    dst = NodeType("head", 1, 16, uplink=1e9, downlink=1e9, rtt_s=0.01)
    costs = {t: StageCosts(decode_cs=1e-4, embed_cs=1e-4, **FREE) for t in ("src", "head")}
    cluster = Cluster((dst, src), "head")  # nodes: head-0 (index 0), src-0 (index 1)
    r = simulate(
        cluster, costs, Candidate((0, 2), ((0,),)), Workload(videos=4, frames_per_video=1024)
    )
    # The link is saturated (rows queue for it), so the real codec policy compresses: the
    # rate is the link's bytes/s over the mean bytes of a row as sent.
    sent = sum(n * (ROW_WIRE - 6656 + WIRE_BYTES[codec]) for codec, n in r.codec_rows.items())
    assert r.fps == pytest.approx(mbit * 1e6 / 8 / (sent / (4 * 1024)), rel=0.05)
    assert sum(r.codec_rows.values()) == pytest.approx(4 * 1024)
    assert r.codec_rows.get("fp32", 0) < 0.05 * 4 * 1024


def test_videos_that_arrive_faster_than_they_are_served_wait_ever_longer():
    # All videos arrive at once; one extractor serves one at a time: the k-th waits k services.
    costs = {"head": StageCosts(decode_cs=0.001, embed_cs=0.009, **FREE)}
    sim = Simulation(
        one_node(1), costs, Candidate((1,), ((0,),)), Workload(videos=6, frames_per_video=100)
    )
    r = sim.run()
    service = 100 * 0.01
    waits = sim.started
    assert waits == pytest.approx([k * service for k in range(6)], rel=0.05, abs=0.05)
    assert all(b > a for a, b in zip(waits, waits[1:]))
    assert r.seconds == pytest.approx(6 * service, rel=0.05)


def test_a_slow_shard_bounds_the_whole_pipeline():
    # Applying a row costs more than making it: the shard's one thread is the bottleneck.
    costs = {"head": StageCosts(decode_cs=1e-4, embed_cs=1e-4, **{**FREE, "apply_cs": 0.01})}
    r = simulate(
        one_node(8), costs, Candidate((2,), ((0,),)), Workload(videos=4, frames_per_video=512)
    )
    assert r.fps == pytest.approx(1 / 0.01, rel=0.05)


def test_two_stages_on_one_core_share_it():
    # Decoding runs ahead on its own thread, but both stages take the node's one core (less
    # Ray's own): 0.5 + 0.5 core-seconds a frame is at most a frame a second through both.
    costs = {"head": StageCosts(decode_cs=0.5, embed_cs=0.5, **FREE)}
    r = simulate(
        one_node(1), costs, Candidate((1,), ((0,),)), Workload(videos=2, frames_per_video=64)
    )
    assert r.fps == pytest.approx(1.0 - RAY_CORES, rel=0.03)
    assert r.cpu_s[0] == pytest.approx({"decode": 64.0, "embed": 64.0})


@pytest.mark.parametrize(("extractors", "per_frame"), [(1, 0.01), (2, 0.04)])
def test_extractors_embedding_at_once_on_a_node_pay_its_crowded_cost(extractors, per_frame):
    # Two cores. Alone, an extractor's torch threads take both at 0.01 core-s a frame; two
    # extractors embedding at once pay 0.04 a frame (threads spinning for cores).
    costs = {"head": StageCosts(decode_cs=1e-5, embed_cs=0.01, embed_cs_crowded=0.04, **FREE)}
    r = simulate(
        one_node(2),
        costs,
        Candidate((extractors,), ((0,),)),
        Workload(videos=4, frames_per_video=256),
    )
    assert r.fps == pytest.approx(2 / per_frame, rel=0.05)


def test_a_replica_applies_every_row_on_its_own_node():
    costs = {"head": StageCosts(decode_cs=1e-4, embed_cs=1e-3, **{**FREE, "apply_cs": 1e-4})}
    r = simulate(
        Cluster((NodeType("head", 2, 4),), "head"),
        costs,
        Candidate((1, 0), ((0, 1),)),
        Workload(videos=2, frames_per_video=100),
    )
    assert r.frames == 200
    assert r.cpu_s[1] == pytest.approx({"shard": 200 * 1e-4})


def test_an_extractor_embeds_on_no_more_cores_than_its_threads():
    # Four cores, torch told to use one thread: one extractor embeds on one core.
    costs = {"head": StageCosts(decode_cs=1e-5, embed_cs=0.01, embed_threads=1, **FREE)}
    r = simulate(
        one_node(4), costs, Candidate((1,), ((0,),)), Workload(videos=2, frames_per_video=256)
    )
    assert r.fps == pytest.approx(1 / 0.01, rel=0.03)


def test_a_share_below_a_core_embeds_on_one_thread_by_default():
    # Two cores at a 0.3 share: torch's default (``Config.threads`` under the quota) is one
    # thread, so one extractor embeds at the share's rate (less Ray's own), not above it.
    costs = {"head": StageCosts(decode_cs=1e-5, embed_cs=0.01, **FREE)}
    r = simulate(
        one_node(2, 0.15), costs, Candidate((1,), ((0,),)), Workload(2, 256, embed_batch=16)
    )
    assert r.fps == pytest.approx((0.3 - RAY_CORES) / 0.01, rel=0.03)


def two_hosts(down_mbit: float) -> Cluster:
    head = NodeType("head", 1, 16, uplink=1e9 / 8, downlink=1e9 / 8, rtt_s=0.01)
    far = NodeType("far", 1, 16, uplink=1e9 / 8, downlink=down_mbit * 1e6 / 8, rtt_s=0.01)
    return Cluster((head, far), "head")  # nodes: head-0 (index 0), far-0 (index 1)


@pytest.mark.parametrize("extractors", [1, 2])
def test_videos_bound_for_another_node_cross_its_downlink_whole(extractors):
    # Stages nearly free; each 2.5 MB video crosses a 10 Mbit downlink (2 s) before decoding.
    # Two extractors there share the link fairly: the same frames/s as one.
    costs = {t: StageCosts(decode_cs=1e-5, embed_cs=1e-5, **FREE) for t in ("head", "far")}
    work = Workload(videos=8, frames_per_video=100, video_bytes=2.5e6)
    r = simulate(two_hosts(10), costs, Candidate((0, extractors), ((0,),)), work)
    assert r.fps == pytest.approx(100 / 2.0, rel=0.05)
    # On the head itself the file is opened where it lies: nothing to wait for.
    local = simulate(two_hosts(10), costs, Candidate((1, 0), ((0,),)), work)
    assert local.fps > 20 * r.fps


def test_searches_take_their_cpu_from_the_ingest_on_the_head():
    # Ten searches a second, each embedding its text for 0.05 core-s on the head: half a core
    # less for embedding frames there.
    costs = {"head": StageCosts(decode_cs=0.001, embed_cs=0.05, query_cs=0.05, **FREE)}
    work = Workload(videos=4, frames_per_video=512, queries_per_s=10)
    r = simulate(one_node(2), costs, Candidate((1,), ((0,),)), work)
    assert r.fps == pytest.approx((2 - RAY_CORES - 10 * 0.05) / 0.051, rel=0.03)
    assert r.cpu_s[0]["query"] == pytest.approx(10 * r.seconds * 0.05, rel=0.1)


def test_a_search_is_answered_once_its_shard_has_searched_across_the_link():
    # Nothing else busy where the search runs: its text's embedding on the head, the round
    # trip to the shard's node and the search there over the rows it holds, one after another.
    costs = {
        t: StageCosts(
            decode_cs=0.01,  # 100 frames/s: the batch lasts 40 s, some 80 searches
            embed_cs=1e-4,
            query_cs=0.02,
            search_cs=0.005,
            search_row_cs=1e-8,
            **FREE,
        )
        for t in ("head", "far")
    }
    work = Workload(videos=40, frames_per_video=100, queries_per_s=2, index_rows=1_000_000)
    r = simulate(two_hosts(1000), costs, Candidate((1, 0), ((1,),)), work)
    assert r.query_p50_s == pytest.approx(0.02 + 0.01 + 0.005 + 1e-8 * 1_000_000, rel=0.05)


def test_searches_go_to_a_shards_replicas_in_turn():
    costs = {
        "head": StageCosts(decode_cs=1e-4, embed_cs=1e-3, search_cs=0.01, **FREE),
    }
    work = Workload(videos=4, frames_per_video=200, queries_per_s=20)
    r = simulate(
        Cluster((NodeType("head", 3, 4),), "head"), costs, Candidate((1, 0, 0), ((1, 2),)), work
    )
    assert r.cpu_s[1]["search"] == pytest.approx(r.cpu_s[2]["search"], rel=0.05)
    assert "search" not in r.cpu_s[0]


def test_searches_that_come_faster_than_the_head_embeds_them_wait_ever_longer():
    # Four a second at 0.6 core-second each: more than the head's two cores, which also embed
    # frames. Searches pile up: their p50 is many times what one costs, and grows with the run.
    costs = {"head": StageCosts(decode_cs=0.001, embed_cs=0.05, query_cs=0.6, **FREE)}
    runs = [
        simulate(
            one_node(2),
            costs,
            Candidate((1,), ((0,),)),
            Workload(videos=videos, frames_per_video=256, queries_per_s=4),
        )
        for videos in (2, 4)
    ]
    assert runs[0].query_p50_s > 10 * 0.6
    assert runs[1].query_p50_s > 1.5 * runs[0].query_p50_s


def test_an_api_replica_serves_at_most_its_ongoing_searches_at_once():
    # Each search waits a 1 s round trip on the far shard. One replica keeps at most 32 in
    # flight, so serves at most 32 a second: at 48 a second they queue, ever longer. Two
    # replicas keep up, and a search takes its round trip and little more.
    far = NodeType("far", 1, 4, rtt_s=1.0)
    cluster = Cluster((NodeType("head", 1, 4, rtt_s=1.0), far), "head")
    costs = {
        t: StageCosts(decode_cs=0.01, embed_cs=1e-4, query_cs=1e-3, search_cs=1e-3, **FREE)
        for t in ("head", "far")
    }
    work = Workload(videos=20, frames_per_video=100, queries_per_s=48)
    one, two = (
        simulate(cluster, costs, Candidate((1, 0), ((1,),), api_replicas=k), work) for k in (1, 2)
    )
    assert two.query_p50_s == pytest.approx(1.0 + 2e-3, rel=0.05)
    assert one.query_p50_s > 3 * two.query_p50_s
    assert one.fps == pytest.approx(two.fps, rel=0.02)
