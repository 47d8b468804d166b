"""The simulated extractor actor (``simulate.py`` runs one per extractor): videos one at a
time, decode ahead, embed in batches, one hand-over in flight. It drives the run it is part of
through ``_Run``, what it uses of ``simulate.Simulation``, so that this module needs no import
of it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from vifusion.plan._events import Cpu, Sim
from vifusion.plan.hardware import Node, NodeType
from vifusion.plan.terms import Candidate, StageCosts, Workload


class _Run(Protocol):
    """What an extractor uses of the run: its clock, the nodes' CPUs and GPUs, the placement,
    the workload, and the steps before and after its own."""

    sim: Sim
    nodes: list[Node]
    costs: list[StageCosts]  # by node
    cpu: list[Cpu]
    gpu: list[Cpu | None]
    embedding: list[int]  # extractors embedding on each node's CPU now
    cand: Candidate
    work: Workload
    # (node, shard, video, frames, when embedded, called once handed over)
    submit: Callable[[int, int, int, int, float, Callable[[], None]], None]

    def take_video(self) -> int | None: ...
    def ship(self, node: int, then: Callable[[], None]) -> None: ...
    def handed_over(self, frames: int) -> None: ...
    def finish(self, node: int, shard: int, video: int, done: Callable[[], None]) -> None: ...


def embed_threads(t: NodeType, costs: StageCosts, sharing: int = 1) -> int:
    """Torch's threads in an extractor on a node of type ``t`` with ``sharing`` extractors:
    as configured, else its share of the whole cores the node's share allows, at least one
    (``Config.threads`` under a cgroup quota, split as ``extract/actor.py`` splits it)."""
    own = max(1, int(t.cores) // max(sharing, 1))
    return min(costs.embed_threads or own, int(t.cpus) or 1)


class SimulatedExtractor:
    """One extractor actor: videos one at a time, decode ahead, one hand-over in flight."""

    _DEPTH = 2  # prefetch depth

    def __init__(self, s: _Run, node: int) -> None:
        self.s, self.node = s, node
        self.costs = s.costs[node]
        n = s.nodes[node]
        self.gpu = s.gpu[node] if self.costs.embed_gpu_s and n.type.gpus else None
        self.threads = embed_threads(n.type, self.costs, s.cand.extractors[node])

    def next_video(self) -> None:
        video = self.s.take_video()
        if video is None:
            return
        self.video, self.shard = video, video % len(self.s.cand.shards)
        frames, b = self.s.work.frames_per_video, self.s.work.embed_batch
        self.batches = [min(b, frames - i) for i in range(0, frames, b)]
        self.decoded = self.ready = self.embedded_n = self.handed_n = 0
        self.decoding = self.embedding = self.handing = False
        self.waiting: tuple[int, float] | None = None  # an embedded batch not yet handed over
        self.s.ship(self.node, self._decode)

    def _decode(self) -> None:
        if self.decoding or self.ready >= self._DEPTH or self.decoded >= len(self.batches):
            return
        self.decoding = True
        n = self.batches[self.decoded]
        self.s.cpu[self.node].add(n * self.costs.decode_cs, 1.0, self._decoded, "decode")

    def _decoded(self) -> None:
        self.decoding = False
        self.decoded += 1
        self.ready += 1
        self._decode()
        self._embed()

    def _embed(self) -> None:
        if self.embedding or not self.ready or self.waiting is not None:
            return
        self.embedding, self.ready = True, self.ready - 1
        self._decode()
        n = self.batches[self.embedded_n]
        if self.gpu is not None:
            self.s.cpu[self.node].add(n * self.costs.text_cs, 1.0, lambda: None, "text")
            self.gpu.add(n * self.costs.embed_gpu_s, 1.0, self._embedded)
        else:
            self.s.embedding[self.node] += 1
            embed = self.costs.embed_cs_among(self.s.embedding[self.node])
            self.s.cpu[self.node].add(
                n * (embed + self.costs.text_cs), self.threads, self._embedded, "embed"
            )

    def _embedded(self) -> None:
        if self.gpu is None:
            self.s.embedding[self.node] -= 1
        self.embedding = False
        self.waiting = (self.batches[self.embedded_n], self.s.sim.now)
        self.embedded_n += 1
        self._hand()

    def _hand(self) -> None:
        if self.handing or self.waiting is None:
            return
        (n, t), self.waiting = self.waiting, None
        self.handing = True
        self.s.submit(self.node, self.shard, self.video, n, t, self._handed)
        self._embed()

    def _handed(self) -> None:
        self.handing = False
        self.handed_n += 1
        self.s.handed_over(self.batches[self.handed_n - 1])
        if self.handed_n == len(self.batches):
            self.s.finish(self.node, self.shard, self.video, self.next_video)
        else:
            self._hand()
