"""The discrete-event engine of ``simulate.py``: an event queue, and CPU shared between the
work running on a node (processor sharing)."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable


class Sim:
    """The event queue and the simulated clock (``now``, seconds)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._q: list[tuple[float, int, Callable, tuple]] = []
        self._seq = 0

    def at(self, t: float, fn: Callable, *args: object) -> None:
        self._seq += 1
        heapq.heappush(self._q, (t, self._seq, fn, args))

    def stop(self) -> None:
        self._q.clear()

    def run(self, until: float) -> None:
        while self._q:
            t, _, fn, args = heapq.heappop(self._q)
            if t > until:
                break
            self.now = t
            fn(*args)


class Cpu:
    """Processor sharing over ``capacity`` cores; a job runs at most at its ``cap`` cores.
    ``spent``: core-seconds of work given to it, by stage."""

    def __init__(self, sim: Sim, capacity: float) -> None:
        self.sim, self.capacity = sim, capacity
        self.spent: dict[str, float] = {}
        self.jobs: list[list] = []  # [work left, cap, callback]
        self.rates: list[float] = []
        self.t = 0.0
        self.version = 0

    def add(self, work: float, cap: float, done: Callable[[], None], stage: str = "") -> None:
        self.spent[stage] = self.spent.get(stage, 0.0) + max(work, 0.0)
        if work <= 0:
            self.sim.at(self.sim.now, done)
            return
        self._advance()
        self.jobs.append([work, cap, done])
        self._schedule()

    def _advance(self) -> None:
        dt = self.sim.now - self.t
        if dt > 0:
            for job, rate in zip(self.jobs, self.rates):
                job[0] -= rate * dt
        self.t = self.sim.now

    def _schedule(self) -> None:
        self.version += 1
        n, left = len(self.jobs), self.capacity
        self.rates = [0.0] * n
        for k, i in enumerate(sorted(range(n), key=lambda i: self.jobs[i][1])):
            self.rates[i] = min(self.jobs[i][1], left / (n - k))
            left -= self.rates[i]
        if self.jobs:
            wait = min(j[0] / r if r else math.inf for j, r in zip(self.jobs, self.rates))
            self.sim.at(self.sim.now + max(wait, 0.0), self._fire, self.version)

    def _fire(self, version: int) -> None:
        if version != self.version:
            return
        self._advance()
        # This fires when the soonest job ends: it is done, and any due within a nanosecond
        # (a remainder of rounding must not schedule an event that never moves the clock).
        left = [j[0] / r if r else math.inf for j, r in zip(self.jobs, self.rates)]
        soonest = min(left)
        done = [j for j, t in zip(self.jobs, left) if t <= soonest + 1e-9]
        self.jobs = [j for j, t in zip(self.jobs, left) if t > soonest + 1e-9]
        self._schedule()
        for j in done:
            j[2]()


class Serial:
    """One thread on a node: its jobs one after another, each on at most one core."""

    def __init__(self, cpu: Cpu, stage: str) -> None:
        self.cpu, self.stage, self.queue, self.busy = cpu, stage, [], False

    def add(self, work: float, done: Callable[[], None]) -> None:
        self.queue.append((work, done))
        self._next()

    def _next(self) -> None:
        if self.busy or not self.queue:
            return
        self.busy = True
        work, done = self.queue.pop(0)

        def finished() -> None:
            self.busy = False
            done()
            self._next()

        self.cpu.add(work, 1.0, finished, self.stage)
