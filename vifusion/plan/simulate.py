"""A discrete-event simulation of ingest on a described cluster, for one candidate placement.

Per video (the next free extractor takes it; shard ``video_id mod num_shards``): **ship**
(the file from the head to an extractor on another node), **decode**
(one thread, two ahead) and **embed** (torch on the node's cores, or its GPU) in batches of
``embed_batch`` frames, speech and screen text as CPU work (``text_cs`` a frame); **hand-over**
to the node aggregator (one in flight; its one core dedups and buffers; ``submit`` blocks
while a batch is buffered); **fuse** by the real ``FlushPolicy``, ``FusionBuffer.due`` and
``CodecPolicy``; **link** first come first served at min(uplink, downlink), plus half a
round trip; **shard**: the primary applies a batch on one core, a group commit acknowledges
it, each replica applies it too. A video is finished once every row of it is acknowledged.
Text searches served meanwhile (``Workload.queries_per_s``, ``_queries.py``) take CPU on the
head and at the shard replicas, and report their p50.

CPU on a node (its ``work_cores``: Ray's own processes take the rest) is shared equally
among the running work (processor sharing), none more than it can use. Reports frames per second over the run and the p50 of a row's embedded ->
acknowledged time (as ``benchmarks/plan.py`` and the aggregator measure them). A video file
lives on the head; an extractor elsewhere receives it whole before decoding (``ship``). Not
modelled: dedup runs held open, per-video start, Ray's scheduling, other traffic on the links.
The event engine is ``_events.py``; the buffer and link models are ``_paths.py``; an
extractor's model is ``_sim_extractor.py``; what a run takes and gives is in ``terms.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from vifusion.fusion.policy import FlushPlan, FlushPolicy
from vifusion.plan._events import Cpu, Serial, Sim
from vifusion.plan._paths import RUNGS, Link, Rows
from vifusion.plan._queries import Queries
from vifusion.plan._sim_extractor import SimulatedExtractor
from vifusion.plan.hardware import Cluster, Node, path
from vifusion.plan.terms import Candidate, Result, StageCosts, Workload

_LOCAL = (2e9, 50e-6)  # bytes/s and round trip within one node (loopback)
_ROW_EXTRA = 16  # ids and times travel beside the features
_WARM, _MEASURED, _MEASURED_MIN = 3, 3, 40


class Simulation:
    """One run of ``workload`` on ``cluster`` placed as ``candidate`` (``costs``: by node type)."""

    def __init__(
        self,
        cluster: Cluster,
        costs: dict[str, StageCosts],
        candidate: Candidate,
        workload: Workload,
    ) -> None:
        self.sim = Sim()
        self.nodes: list[Node] = cluster.nodes()
        self.costs = [costs[n.type.name] for n in self.nodes]
        self.cand, self.work = candidate, workload
        self.cpu = [Cpu(self.sim, n.type.work_cores) for n in self.nodes]
        self.gpu = [Cpu(self.sim, n.type.gpus) if n.type.gpus else None for n in self.nodes]
        self.embedding = [0] * len(self.nodes)  # extractors embedding on their CPU now
        self.agg = [Serial(c, "aggregator") for c in self.cpu]
        self.uplink_free = [0.0] * len(self.nodes)
        head = self.nodes[0].type
        self.head_out = Cpu(self.sim, head.uplink)
        self.node_in = [Cpu(self.sim, n.type.downlink) for n in self.nodes]
        self.policy = FlushPolicy(
            workload.latency_target_s,
            min_bytes=candidate.fusion_min_bytes,
            max_bytes=candidate.fusion_max_bytes,
        )
        self.links: dict[tuple[int, int], Link] = {}
        self.shard_apply = [Serial(self.cpu[group[0]], "shard") for group in candidate.shards]
        self.staged: list[list] = [[] for _ in candidate.shards]
        self.syncing = [False] * len(candidate.shards)
        self.pending: dict[int, float] = {}  # video -> rows not yet acknowledged
        self.finishing: dict[int, Callable[[], None]] = {}
        self.room_waiters: dict[tuple[int, int], list[Callable[[], None]]] = {}
        self.next_video = 0
        self.started: list[float] = []  # when each video's extraction began, in video order
        self.frames_done = 0
        self.last_ack = 0.0
        # (time, frames handed over by then), steady runs
        self.handed: list[tuple[float, int]] = [(0.0, 0)]
        self.marks = (0, 0)
        self.latencies: list[tuple[float, float]] = []  # (latency, rows)
        self.messages = 0
        self.codec_rows: dict[str, float] = {}
        self.queries = Queries(self)

    # -- driving ------------------------------------------------------------------------

    def run(self, horizon_s: float = 3600.0) -> Result:
        for i, k in enumerate(self.cand.extractors):
            for _ in range(k):
                SimulatedExtractor(self, i).next_video()
        self.queries.start()
        if self.work.steady:
            extractors = sum(self.cand.extractors)
            warm, measured = _WARM, _MEASURED
            if self.work.video_bytes:  # whole videos, each with its transfer
                per_video = math.ceil(self.work.frames_per_video / self.work.embed_batch)
                warm, measured = max(warm, per_video), max(measured, 2 * per_video)
            self.marks = (
                warm * extractors,
                warm * extractors + max(measured * extractors, _MEASURED_MIN),
            )
            self.sim.run(horizon_s)
            (t0, f0), (t1, f1) = self.handed[self.marks[0]], self.handed[-1]
            return Result(
                (f1 - f0) / (t1 - t0) if t1 > t0 else 0.0,
                self._p50(),
                int(f1 - f0),
                t1 - t0,
                self.messages,
                self.codec_rows,
                self._spent(),
                self.queries.p50_s(),
            )
        self.sim.run(horizon_s)
        seconds = self.last_ack or self.sim.now
        return Result(
            self.frames_done / seconds if seconds else 0.0,
            self._p50(),
            self.frames_done,
            seconds,
            self.messages,
            self.codec_rows,
            self._spent(),
            self.queries.p50_s(),
        )

    def ingest_over(self) -> bool:
        """Every video of a batch handed over and acknowledged (a stream never ends)."""
        total = self.work.videos * self.work.frames_per_video
        return not self.work.steady and self.frames_done >= total and not self.pending

    def measuring(self) -> bool:
        """Past a steady run's warm-up (a batch is measured whole)."""
        return not self.work.steady or len(self.handed) > self.marks[0]

    def _spent(self) -> list[dict[str, float]]:
        return [{k: v for k, v in c.spent.items() if v} for c in self.cpu]

    def _p50(self) -> float:
        lat = sorted(self.latencies)
        half, acc, p50 = sum(r for _, r in lat) / 2, 0.0, 0.0
        for value, rows in lat:
            acc += rows
            if acc >= half:
                p50 = value
                break
        return p50

    def handed_over(self, frames: int) -> None:
        """An extractor handed ``frames`` over; a steady run stops once it has measured."""
        self.frames_done += frames
        if self.work.steady:
            self.handed.append((self.sim.now, self.frames_done))
            if len(self.handed) > self.marks[1]:
                self.sim.stop()

    def take_video(self) -> int | None:
        if self.next_video >= self.work.videos and not self.work.steady:
            return None
        self.next_video += 1
        self.started.append(self.sim.now)
        return self.next_video  # ids from 1, as the catalog's

    def ship(self, node: int, then: Callable[[], None]) -> None:
        """A video reaches an extractor on ``node``: on the head it opens the file; elsewhere
        the file crosses the path from the head whole before decoding starts (nodes share no
        disk, ``extract/_spool.py``). The transfers share the narrower end of that path fairly
        (the head's uplink, or the node's downlink), as TCP flows do, then half a round trip;
        the model does not make them compete with feature rows for a link."""
        if node == 0 or not self.work.video_bytes:
            then()
            return
        head, dst = self.nodes[0].type, self.nodes[node].type
        rate, rtt = path(head, dst)
        narrow = self.head_out if head.uplink <= dst.downlink else self.node_in[node]
        narrow.add(
            self.work.video_bytes, rate, lambda: self.sim.at(self.sim.now + rtt / 2, then), "video"
        )

    # -- the aggregator -------------------------------------------------------------------

    def link(self, node: int, shard: int) -> Link:
        key = (node, shard)
        if key not in self.links:
            dst = self.cand.shards[shard][0]
            rate, rtt = _LOCAL if dst == node else path(self.nodes[node].type, self.nodes[dst].type)
            self.links[key] = Link(
                self.sim, rate, rtt, self.costs[dst].message_cs, self.cand.floor(node)
            )
        return self.links[key]

    def submit(
        self,
        node: int,
        shard: int,
        video: int,
        frames: int,
        extracted: float,
        handed: Callable[[], None],
    ) -> None:
        costs = self.costs[node]

        def aggregated() -> None:
            rows = frames * costs.dedup_ratio
            link = self.link(node, shard)
            self.pending[video] = self.pending.get(video, 0.0) + rows
            link.buffer.add_rows(rows, video, self.sim.now, extracted)
            self.pump(node, shard)
            self._when_room(node, shard, handed)

        self.agg[node].add(frames * costs.aggregate_cs, aggregated)

    def _plan(self, link: Link) -> FlushPlan:
        return self.policy.plan(link.stats(self.sim.now), link.wire_ratio(), by_stream=True)

    def _when_room(self, node: int, shard: int, then: Callable[[], None]) -> None:
        link = self.link(node, shard)
        if link.buffer.nbytes < self._plan(link).max_bytes:
            then()
        else:
            self.room_waiters.setdefault((node, shard), []).append(then)

    def finish(self, node: int, shard: int, video: int, done: Callable[[], None]) -> None:
        if self.pending.get(video, 0.0) <= 1e-6:
            self.pending.pop(video, None)
            done()
            return
        self.finishing[video] = done
        link = self.link(node, shard)
        link.urgent = True
        self.pump(node, shard)

    def pump(self, node: int, shard: int) -> None:
        """The aggregator's pump for one destination (``Aggregator._pump_once``)."""
        link, now = self.link(node, shard), self.sim.now
        plan = self._plan(link)
        idle, room = not link.in_flight, plan.window - link.in_flight
        size = plan.max_bytes
        if (
            idle and link.buffer.nbytes < size
        ):  # less than a batch leaves at once, cut in up to a window of parts
            size = max(math.ceil(link.buffer.nbytes / room), self.cand.fusion_min_bytes)
        while room > 0 and (
            link.buffer.due(plan, now, link_idle=idle) or (link.urgent and len(link.buffer))
        ):
            self._send(node, shard, link, link.buffer.take_rows(size))
            room -= 1
        if not len(link.buffer):
            link.urgent = False
        elif room > 0:
            due = (
                link.buffer.oldest() + plan.max_age_s + 1e-9
            )  # past rounding: due() must see it due
            if link.timer is None or link.timer > due:
                link.timer = due
                self.sim.at(max(due, now), self._timer, node, shard, due)
        waiters = self.room_waiters.get((node, shard))
        while waiters and link.buffer.nbytes < plan.max_bytes:
            waiters.pop(0)()

    def _timer(self, node: int, shard: int, due: float) -> None:
        link = self.link(node, shard)
        if link.timer == due:
            link.timer = None
            self.pump(node, shard)

    def _send(self, node: int, shard: int, link: Link, chunks: list[Rows]) -> None:
        rows = sum(c.rows for c in chunks)
        level = link.policy.level
        nbytes = int(rows * (RUNGS[level].bytes_per_row + _ROW_EXTRA))
        self.codec_rows[RUNGS[level].name] = self.codec_rows.get(RUNGS[level].name, 0.0) + rows
        link.in_flight += 1
        link.in_flight_bytes += nbytes
        self.messages += 1
        encode = rows * self.costs[node].encode_cs[min(level, len(self.costs[node].encode_cs) - 1)]
        self.agg[node].add(encode, lambda: self._transmit(node, shard, link, chunks, rows, nbytes))

    def _transmit(
        self, node: int, shard: int, link: Link, chunks: list[Rows], rows: float, nbytes: int
    ) -> None:
        now, dst = self.sim.now, self.cand.shards[shard][0]
        if dst == node:
            arrive = now + nbytes / link.rate + link.rtt / 2
        else:
            start = max(now, self.uplink_free[node])
            self.uplink_free[node] = start + nbytes / link.rate
            link.qdelay = 0.7 * link.qdelay + 0.3 * (start - now)
            arrive = self.uplink_free[node] + link.rtt / 2
        self.sim.at(arrive, self._receive, node, shard, link, chunks, rows, nbytes)

    # -- the shard ------------------------------------------------------------------------

    def _receive(
        self, node: int, shard: int, link: Link, chunks: list[Rows], rows: float, nbytes: int
    ) -> None:
        arrived = self.sim.now
        group = self.cand.shards[shard]
        costs = self.costs[group[0]]

        def applied() -> None:
            self.staged[shard].append((node, link, chunks, nbytes, arrived))
            self._sync(shard)

        self.shard_apply[shard].add(rows * costs.apply_cs + costs.message_cs, applied)
        for replica in group[1:]:  # a replica applies what the primary logged, on its own node
            self.cpu[replica].add(rows * self.costs[replica].apply_cs, 1.0, lambda: None, "shard")

    def _sync(self, shard: int) -> None:
        if self.syncing[shard] or not self.staged[shard]:
            return
        self.syncing[shard] = True
        batch, self.staged[shard] = self.staged[shard], []

        def synced() -> None:
            self.syncing[shard] = False
            for node, link, chunks, nbytes, arrived in batch:
                self.sim.at(
                    self.sim.now + link.rtt / 2,
                    self._ack,
                    node,
                    shard,
                    link,
                    chunks,
                    nbytes,
                    self.sim.now - arrived,
                )
            self._sync(shard)

        self.sim.at(self.sim.now + self.costs[self.cand.shards[shard][0]].sync_s, synced)

    def _ack(
        self, node: int, shard: int, link: Link, chunks: list[Rows], nbytes: int, service_s: float
    ) -> None:
        now = self.sim.now
        link.in_flight -= 1
        link.in_flight_bytes -= nbytes
        link.service_s = service_s if not link.acked else 0.8 * link.service_s + 0.2 * service_s
        link.on_ack(now, sum(c.rows for c in chunks))
        link.policy.update(link.stats(now))
        self.last_ack = now
        for c in chunks:
            self.latencies.append((now - c.extracted, c.rows))
            self.pending[c.video] -= c.rows
            if self.pending[c.video] <= 1e-6 and c.video in self.finishing:
                self.pending.pop(c.video)
                self.finishing.pop(c.video)()
        self.pump(node, shard)


def simulate(
    cluster: Cluster, costs: dict[str, StageCosts], candidate: Candidate, workload: Workload
) -> Result:
    """Predicted frames/s and p50 of ``candidate`` for ``workload`` (see the module doc)."""
    return Simulation(cluster, costs, candidate, workload).run()
