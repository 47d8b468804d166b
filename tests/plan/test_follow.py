"""The ingest pool's plan follower: an applied plan's links watched against the rates it was
made for, fed readings from the real link monitor (a simulated transfer on a clock the test
moves, as test_replan.py does) in the shape the node aggregators report them; a lasting
change makes and applies a new plan, once.

One host runs the tests, so the plan's two nodes are matched to two made-up node ids (the
placement's matching itself is tests/plan/test_apply.py's)."""

import json
import logging
from dataclasses import asdict

import pytest

from vifusion.cluster.placement import load_plan
from vifusion.comm.link import LinkMonitor
from vifusion.config import Config
from vifusion.plan import follow
from vifusion.plan.follow import PlanFollower
from vifusion.plan.hardware import Cluster, NodeType
from vifusion.plan.planner import apply, made_for, make_plan
from vifusion.plan.terms import StageCosts
from vifusion.runtime import with_applied_plan

MESSAGE = 256 << 10
RTT_S = 0.02
MBIT = 1e6 / 8  # bytes/s
READ_EVERY_S = 5.0
# far-0 makes frames fast, but its uplink to the head is slow: the link bounds the plan.
CLUSTER = Cluster(
    (
        NodeType("head", 1, 2),
        NodeType("far", 1, 4, uplink=2 * MBIT, downlink=2 * MBIT, rtt_s=0.01),
    ),
    "head",
)
COSTS = {t: StageCosts(decode_cs=0.005, embed_cs=0.03) for t in ("head", "far")}
NODES = {"head-0": "node-h", "far-0": "node-f"}  # plan node -> live node id


class Bed:
    """far-0's aggregator sending to shard 0, whose primary is on head-0, a message in flight
    at a time; the follower reads the aggregators every READ_EVERY_S."""

    def __init__(self, tmp_path, replan_after_s: float) -> None:
        self.t = 0.0
        # Files not counted (plan_video_mbps 0): the feature rows alone load the link.
        self.cfg = Config(data_dir=tmp_path, replan_after_s=replan_after_s, plan_video_mbps=0)
        apply(self.cfg, make_plan(self.cfg, CLUSTER, COSTS, parallel=False)[1])
        self.plan = load_plan(tmp_path)  # as JSON holds it
        self.cfg = with_applied_plan(self.cfg)  # as the pool's runtime hands it to the follower
        self.monitor = LinkMonitor(clock=lambda: self.t)
        self.applied: list = []  # new plans the follower handed on (the pool moves actors to them)
        self.follower = PlanFollower(
            self.cfg,
            resolve=lambda plan: dict(NODES),
            clock=lambda: self.t,
            on_applied=self._applied,
        )
        self._read_at = 0.0
        self.lowest = float("inf")  # the least capacity the follower read

    def _applied(self, plan) -> None:
        self.applied.append(plan)

    def run(self, seconds: float, mbit: float, waiting_s: float = 2.0, floor: int = 0) -> None:
        """``waiting_s``: how long the oldest row waits at the sender (the link holds rows
        back), or 0 (the sender has little to send). ``floor``: the link's codec floor, at
        which its codec stays."""
        end = self.t + seconds
        self.monitor.set_backlog_age(waiting_s)
        while self.t < end:
            token = self.monitor.on_send(MESSAGE, backlog=waiting_s > 0)
            self.t += MESSAGE / (mbit * MBIT) + RTT_S
            self.monitor.on_ack(token)
            if self.t >= self._read_at:
                stats = self.monitor.stats()
                self.lowest = min(self.lowest, stats.capacity)
                # as link_view shapes it
                link = asdict(stats) | {
                    "backlog_age_s": stats.backlog_age,
                    "level": floor,
                    "floor": floor,
                }
                fusion = [
                    {"node": "node-h", "links": {}},
                    {"node": "node-f", "links": {0: link}},
                ]
                self.follower.observe(fusion, ["node-h", "node-h"])
                self._read_at = self.t + READ_EVERY_S


def test_a_link_slower_for_good_makes_and_applies_a_new_plan_once(tmp_path, caplog):
    bed = Bed(tmp_path, replan_after_s=30)
    bed.run(120, mbit=2)  # as planned
    assert bed.follower.replans == 0 and load_plan(tmp_path) == bed.plan
    assert bed.follower.predicted_fps == bed.plan["predicted_fps"]
    with caplog.at_level(logging.WARNING, logger="vifusion.plan.follow"):
        bed.run(300, mbit=1)  # half the planned rate, for good
    assert bed.follower.replans == 1
    new = load_plan(tmp_path)
    cluster, costs = made_for(new)
    # far-0's uplink bounded the path: it now has the rate measured (the round trip takes a
    # little off the line rate); the head's downlink is as it was.
    assert 0.8 * MBIT < cluster.type("far").uplink < 1 * MBIT
    assert cluster.type("head").downlink == CLUSTER.type("head").downlink
    assert costs == COSTS
    assert bed.follower.predicted_fps == new["predicted_fps"]  # the plan in force now
    assert "link far-0 -> shard 0 on head-0 carries" in caplog.text
    assert f"{new['predicted_fps']:.1f} frames/s" in caplog.text
    assert "move to it between jobs" in caplog.text
    assert bed.applied == [new]  # handed on to the pool, which hands it to its runtime


def test_the_plan_in_force_is_the_runtimes_and_one_applied_by_hand_is_handed_on(tmp_path):
    bed = Bed(tmp_path, replan_after_s=60)
    bed.follower.observe([], [])  # plan.json is the plan the runtime resolved: nothing new
    assert bed.applied == []
    by_hand = dict(bed.plan, predicted_fps=bed.plan["predicted_fps"] / 2)
    apply(bed.cfg, by_hand)
    bed.follower.observe([], [])
    bed.follower.observe([], [])  # handed on once
    assert bed.applied == [by_hand]
    assert bed.follower.predicted_fps == by_hand["predicted_fps"]


def test_a_search_that_fails_is_tried_again_after_replan_after_s(tmp_path, monkeypatch):
    bed = Bed(tmp_path, replan_after_s=30)
    bed.run(120, mbit=2)
    tries = []

    def failing_once(*args, **kwargs):
        tries.append(bed.t)
        if len(tries) == 1:
            raise RuntimeError("a search that broke")
        return make_plan(*args, **kwargs)

    monkeypatch.setattr(follow, "make_plan", failing_once)
    with pytest.raises(RuntimeError, match="broke"):  # the pool's thread logs it and reads on
        bed.run(300, mbit=1)
    assert bed.follower.replans == 0 and load_plan(tmp_path) == bed.plan
    bed.run(300, mbit=1)  # still slow: planned for once it has been for replan_after_s again
    assert len(tries) == 2 and tries[1] - tries[0] >= 30
    assert bed.follower.replans == 1 and load_plan(tmp_path) != bed.plan


def test_a_dip_shorter_than_replan_after_s_is_not_planned_for(tmp_path):
    bed = Bed(tmp_path, replan_after_s=30)
    bed.run(120, mbit=2)
    # The capacity is a high percentile of a minute's rates: it reads the dip for under 30 s.
    bed.run(60, mbit=1)
    bed.run(200, mbit=2)
    assert bed.lowest < 0.7 * 2 * MBIT  # the dip was read
    assert bed.follower.replans == 0 and load_plan(tmp_path) == bed.plan


def test_a_link_that_carries_less_than_planned_with_nothing_waiting_is_not_planned_for(
    tmp_path,
):
    # A light load: what the link carried is below its rate, but no row waited for it.
    bed = Bed(tmp_path, replan_after_s=30)
    bed.run(300, mbit=1, waiting_s=0.0)
    assert bed.lowest < 0.7 * 2 * MBIT  # read as carrying half the plan
    assert bed.follower.replans == 0 and load_plan(tmp_path) == bed.plan
    bed.run(300, mbit=1)  # the same rate with rows held back: the link is the limit
    assert bed.follower.replans == 1


def test_a_link_compressed_only_by_its_floor_is_not_held_back(tmp_path):
    # int8 by the plan's codec floor, not for congestion: a light load still reads as light.
    bed = Bed(tmp_path, replan_after_s=30)
    bed.run(300, mbit=1, waiting_s=0.0, floor=2)
    assert bed.follower.replans == 0 and load_plan(tmp_path) == bed.plan


def test_a_link_within_one_node_is_not_watched(tmp_path):
    bed = Bed(tmp_path, replan_after_s=1)
    fusion = [{"node": "node-h", "links": {0: {"capacity": 100 * MBIT}}}]  # head-0 to head-0
    for bed.t in range(0, 100, 5):
        bed.follower.observe(fusion, ["node-h", "node-h"])
    assert bed.follower.replans == 0


def test_a_plan_from_before_the_record_is_followed_no_further(tmp_path, caplog):
    bed = Bed(tmp_path, replan_after_s=1)
    old = {k: v for k, v in bed.plan.items() if k not in ("cluster", "costs")} | {"version": 1}
    (tmp_path / "plan.json").write_text(json.dumps(old))
    fusion = [{"node": "node-f", "links": {0: {"capacity": 0.5 * MBIT}}}]
    with caplog.at_level(logging.WARNING, logger="vifusion.plan.follow"):
        for bed.t in range(0, 100, 5):
            bed.follower.observe(fusion, ["node-h", "node-h"])
    assert bed.follower.replans == 0 and load_plan(tmp_path) == old
    assert bed.follower.predicted_fps == pytest.approx(old["predicted_fps"])  # still in force
    assert caplog.text.count("does not record the cluster") == 1  # logged once
