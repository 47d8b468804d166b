"""Text searches served while the ingest runs, in ``simulate.py``.

They arrive at random (a Poisson stream, seeded, so that a candidate's run is the same every
time). Each embeds its text at an API replica on the head (``query_cs`` on one core, beside the
head's extractors and aggregator; each of the candidate's replicas serves at most ``API_ONGOING``
at once, and the rest wait their turn),
then asks every shard at once: each shard at its next
replica in turn, as ``ShardSet.search`` does, over the path to that replica's node
(``search_cs`` plus ``search_row_cs`` a row the shard holds, on one core there). A search is
answered once every shard has answered. Their CPU is taken from the ingest on those nodes
(processor sharing), and ``load`` says how much, for the search's bounds.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Protocol

from vifusion.cluster.placement import API_ONGOING
from vifusion.plan._events import Cpu, Sim
from vifusion.plan.hardware import Cluster, Node, path
from vifusion.plan.terms import Candidate, StageCosts, Workload

_LOCAL_RTT = 50e-6  # a search to a shard on the head's own node: loopback


def at_shard_cs(costs: StageCosts, workload: Workload, shards: int) -> float:
    """Core-seconds one search costs at one replica of one of ``shards`` shards."""
    return costs.search_cs + costs.search_row_cs * workload.index_rows / max(shards, 1)


def load(
    cluster: Cluster, costs: dict[str, StageCosts], c: Candidate, workload: Workload
) -> list[float]:
    """Cores the searches keep busy on each node, on average: the head embeds every query,
    and each replica of a shard serves its turn of the searches."""
    nodes = cluster.nodes()
    busy = [0.0] * len(nodes)
    rate = workload.queries_per_s
    if not rate:
        return busy
    busy[0] += rate * costs[nodes[0].type.name].query_cs
    for group in c.shards:
        for n in group:
            cs = at_shard_cs(costs[nodes[n].type.name], workload, len(c.shards))
            busy[n] += rate * cs / len(group)
    return busy


class _Run(Protocol):
    """What the search stream uses of the run it is part of (``simulate.Simulation``), so
    that this module needs no import of it."""

    sim: Sim
    nodes: list[Node]
    costs: list[StageCosts]  # by node
    cpu: list[Cpu]
    cand: Candidate
    work: Workload

    def ingest_over(self) -> bool: ...
    def measuring(self) -> bool: ...


class Queries:
    """The search stream of one simulated run: ``start`` it, and read ``p50_s`` at the end."""

    def __init__(self, s: _Run) -> None:
        self.s = s
        self.rng = random.Random(0)
        self.turn = [0] * len(s.cand.shards)
        self.latencies: list[float] = []
        self.open: dict[int, float] = {}  # searches measured and not yet answered: when sent
        self.sent = self.in_flight = 0
        self.waiting: deque[int] = deque()  # searches past the replica's ongoing limit

    def start(self) -> None:
        if self.s.work.queries_per_s > 0:
            self._next()

    def _next(self) -> None:
        gap = self.rng.expovariate(self.s.work.queries_per_s)
        self.s.sim.at(self.s.sim.now + gap, self._arrive)

    def _arrive(self) -> None:
        if self.s.ingest_over():
            return
        self._next()
        self.sent += 1
        if self.s.measuring():
            self.open[self.sent] = self.s.sim.now
        self.waiting.append(self.sent)
        self._take()

    def _take(self) -> None:
        while self.waiting and self.in_flight < API_ONGOING * self.s.cand.api_replicas:
            key = self.waiting.popleft()
            self.in_flight += 1
            self.s.cpu[0].add(
                self.s.costs[0].query_cs, 1.0, lambda k=key: self._fan_out(k), "query"
            )

    def _fan_out(self, key: int) -> None:
        s = self.s
        waiting = [len(s.cand.shards)]

        def answered() -> None:
            waiting[0] -= 1
            if waiting[0]:
                return
            if key in self.open:
                self.latencies.append(s.sim.now - self.open.pop(key))
            self.in_flight -= 1
            self._take()

        for shard, group in enumerate(s.cand.shards):
            node = group[self.turn[shard] % len(group)]
            self.turn[shard] += 1
            rtt = _LOCAL_RTT if node == 0 else path(s.nodes[0].type, s.nodes[node].type)[1]
            cs = at_shard_cs(s.costs[node], s.work, len(s.cand.shards))

            def there(node: int = node, cs: float = cs, rtt: float = rtt) -> None:
                s.cpu[node].add(cs, 1.0, lambda: s.sim.at(s.sim.now + rtt / 2, answered), "search")

            s.sim.at(s.sim.now + rtt / 2, there)

    def p50_s(self) -> float:
        """The median time from a search's arrival to its last shard's answer (0: none sent).
        A search still unanswered at the end counts as long as it has waited: where searches
        come faster than they are served, few are answered, and those soon."""
        now = self.s.sim.now
        lat = sorted(self.latencies + [now - t for t in self.open.values()])
        return lat[len(lat) // 2] if lat else 0.0
