"""Planning again while the service runs: the ingest pool (one per data dir, the owner of the
node aggregators) feeds its aggregators' link readings to a ``LinkWatch`` (``replan.py``)
against the rates the plan in force was made for, and on its word searches again and
applies the new plan.

A link runs from a node's aggregator to a shard's primary. Both ends are matched to the
plan's nodes as the placement matches them (``placement.plan_nodes``: by IP for a plan made
on the running cluster, else the i-th node of its type), and the link's planned rate is the
plan's path between them (``model.path``: min(A's uplink, B's downlink)). A reading below
that counts only while the link held rows back (``carried``). A link within one
node, or with an end the plan does not name, is not watched. Only a plan that records the
cluster and stage costs it was made for (``planner.made_for``) is made again; an older one
is logged once and followed no further.

A re-plan runs the search (``planner.make_plan``) on the plan's cluster with that link's
path at its measured rate (``Cluster.with_path_rate``), with the plan's stage costs, and
writes plan.json (``planner.apply``), which records the new rate: a later change fires only
against it. A plan.json seen to change, so written, or applied by hand while the service
runs, is handed to ``on_applied``: the ingest pool then moves its extractors and node
aggregators to it between jobs (``Runtime.use_plan``). Shard replicas stay where they are:
they hold the index. plan.json is read here, each round, only to see it change: the plan in
force at start is the runtime's (``cfg.plan``, resolved where it started), and the stages
place by the plan handed to them, never by the file.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from vifusion.cluster.placement import applied_plan, plan_nodes
from vifusion.config import Config
from vifusion.datadir import PLAN
from vifusion.plan.hardware import Cluster, Node, NodeType, path
from vifusion.plan.planner import VERSION, apply, describe, made_for, make_plan, videos_of
from vifusion.plan.replan import LinkWatch
from vifusion.plan.terms import StageCosts

log = logging.getLogger(__name__)
EVERY_S = 5.0  # seconds between two rounds of readings (less where replan_after_s is short)
# Rows older than this wait for the link, not for their batch (whose age limit is the fusion
# latency target, 0.2 s by default); the codec policy's ``backlog_s`` alike.
HELD_BACK_S = 0.5

# The aggregators' stats (``JobRunner.fusion_stats``: each with its ``node`` id and its
# ``links`` by shard) and the node id of each shard's primary.
Readings = tuple[list[dict[str, Any]], list[str]]


def carried(link: dict[str, Any], planned: float, tolerance: float) -> float:
    """What one reading (``Aggregator.stats()["links"][shard]``) says the link can carry,
    bytes/s; 0 where it says nothing. The capacity is what the link carried, so a link that
    carried less than planned shows a slower link only while it held rows back (the oldest
    waiting longer than ``HELD_BACK_S``, or a codec taken for congestion, above the link's
    codec floor); otherwise the traffic, not the link, was small, and a lightly used link
    would read as a slow one."""
    rate = max(link["capacity"], link.get("path_rate", 0.0))
    if rate >= planned * (1 - tolerance):
        return rate
    congested = link.get("level", 0) > link.get("floor", 0)  # a codec the floor did not set
    held_back = link.get("backlog_age_s", 0.0) > HELD_BACK_S or congested
    return rate if held_back else 0.0


class PlanFollower:
    """The plan in force, the watch on its links, and the re-plans made so far."""

    def __init__(
        self,
        cfg: Config,
        resolve: Callable[[dict[str, Any]], dict[str, str] | None] = plan_nodes,
        clock: Callable[[], float] = time.monotonic,
        on_applied: Callable[[dict[str, Any] | None], None] = lambda plan: None,
    ) -> None:
        """``cfg.plan``: the plan in force (the runtime's). ``resolve``: plan node name ->
        live node id, None where the plan's nodes are not all there
        (``placement.plan_nodes``). ``on_applied(plan)`` is called with the plan now in force
        once plan.json is seen to differ from it (a re-plan's, or one applied by hand)."""
        self.cfg = cfg
        self._resolve, self._clock, self._on_applied = resolve, clock, on_applied
        self._lock = threading.Lock()  # the figures, read by the pool's stats calls
        self._replans = 0
        self._predicted_fps = 0.0
        self._plan: dict[str, Any] | None = cfg.plan  # the plan in force
        self._loaded = False  # whether plan.json has been read once
        self._made_for: tuple[Cluster, dict[str, StageCosts]] | None = None
        self._resolved_for: tuple[dict[str, Any] | None, frozenset[str]] | None = None
        self._names: dict[str, str] = {}  # live node id -> plan node name
        self._types: dict[str, NodeType] = {}  # plan node name -> its type
        self._watch: LinkWatch | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def replans(self) -> int:
        """Plans made again since this follower started."""
        with self._lock:
            return self._replans

    @property
    def predicted_fps(self) -> float:
        """Frames/s the plan in force predicts; 0 without one."""
        with self._lock:
            return self._predicted_fps

    def observe(self, fusion: list[dict[str, Any]], primaries: list[str]) -> None:
        """One round of readings (``Readings``). plan.json is read first: a plan applied
        meanwhile (by ``vifusion plan --apply`` or a re-plan) is followed from then on. A
        fired watch re-plans here, in the caller's thread (the pool's own, not its jobs')."""
        self._load(frozenset(a["node"] for a in fusion))
        if self._watch is None:
            return
        for agg in fusion:
            src = self._names.get(agg["node"])
            for shard, link in agg["links"].items():
                at = primaries[int(shard)] if int(shard) < len(primaries) else None
                dst = self._names.get(at) if at is not None else None
                if src is None or dst is None or src == dst:
                    continue
                key = f"{src} -> shard {shard} on {dst}"
                planned = self._watch.planned.setdefault(
                    key, path(self._types[src], self._types[dst])[0]
                )
                rate = carried(link, planned, self.cfg.replan_tolerance)
                if self._watch.observe(key, rate):
                    try:
                        self._replan(key, src, dst, planned, rate)
                    except Exception:
                        # Not planned for after all: the watch fires again once the link has
                        # stayed off for another replan_after_s (it took the new rate as planned).
                        self._watch.planned[key] = planned
                        raise
                    return  # the new plan is watched from the next round

    def start(self, read: Callable[[], Readings]) -> None:
        """Observe ``read()`` every few seconds on a thread of its own, until ``close``."""
        self._thread = threading.Thread(target=self._run, args=(read,), name="replan", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    # -- internals ---------------------------------------------------------------------

    def _run(self, read: Callable[[], Readings]) -> None:
        every = min(EVERY_S, self.cfg.replan_after_s / 4)  # several readings within a run
        failing = False
        while not self._stop.wait(every):
            try:
                if not (self.cfg.use_plan and (self.cfg.data_dir / PLAN).exists()):
                    self._load(frozenset())  # no plan in force: nothing of the links to read
                    continue
                self.observe(*read())
                failing = False
            except Exception as e:  # an aggregator or shard restarting: the next round reads again
                if not failing:  # once per outage, not every round of it
                    log.warning("cannot follow the links for re-planning: %s", e)
                failing = True

    def _load(self, aggregators: frozenset[str]) -> None:
        """Read plan.json; on a plan other than the one in force (handed to ``on_applied``),
        or new aggregators (nodes that joined since), match the plan's nodes again and start
        a fresh watch."""
        plan = applied_plan(self.cfg)
        if plan != self._plan or not self._loaded:
            if plan != self._plan:
                self._on_applied(plan)
            self._loaded = True
            self._plan, self._made_for, why = plan, None, f"plan.json before version {VERSION}"
            try:
                self._made_for = made_for(plan) if plan is not None else None
            except (KeyError, TypeError, ValueError) as e:  # a record another version wrote
                why = f"not as this version reads them: {e}"
            if plan is not None and self._made_for is None:
                log.warning(
                    "the plan in force (made %s) does not record the cluster and stage costs it "
                    "was made for (%s): it is not made again when a link changes; "
                    "`vifusion plan --apply` writes one that is",
                    plan.get("made"),
                    why,
                )
        if self._resolved_for == (plan, aggregators):
            return
        self._resolved_for = (plan, aggregators)
        nodes = self._resolve(plan) if plan is not None else None  # logged where None
        with self._lock:
            self._predicted_fps = float(plan.get("predicted_fps", 0.0)) if nodes else 0.0
        self._watch, self._names, self._types = None, {}, {}
        if nodes is None or self._made_for is None:
            return
        self._names = {live: name for name, live in nodes.items()}
        self._types = {n.name: n.type for n in self._made_for[0].nodes()}
        self._watch = LinkWatch(
            {}, self.cfg.replan_tolerance, self.cfg.replan_after_s, clock=self._clock
        )

    def _replan(self, link: str, src: str, dst: str, planned: float, measured: float) -> None:
        """Search again with the link's path at its measured rate, and apply the result.
        The search runs here, not as Ray tasks: an applied plan may give every CPU to
        extractors, and a task would wait for a free one as long as they run."""
        cluster, costs = self._made_for
        # The reading is of one path, whose rate is the lesser of the sender's uplink and the
        # receiver's downlink: it is that bounding access link which is set to it. The model
        # has one rate per node type, so every node of the type takes it: a node of its own
        # rate would need a type of its own, and renaming nodes would unmatch them.
        changed = cluster.with_path_rate(self._types[src].name, self._types[dst].name, measured)
        ips = {n["name"]: n.get("ip") for n in self._plan["nodes"]}
        live = [Node(n.type, n.index, ips.get(n.name)) for n in changed.nodes()]
        try:
            cfg = videos_of(self.cfg, self._plan)
            report, plan = make_plan(cfg, changed, costs, live, parallel=False)
        except ValueError as e:
            log.error("link %s changed, but no plan fits the cluster now: %s", link, e)
            return
        where = apply(self.cfg, plan)
        with self._lock:
            self._replans += 1
        log.warning(
            "link %s carries %.3g Mbit/s, planned for %.3g: planned again: %s; written to %s; "
            "the extractors and node aggregators move to it between jobs",
            link,
            measured * 8 / 1e6,
            planned * 8 / 1e6,
            describe(changed, report.best),
            where,
        )
