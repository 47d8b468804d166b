"""Query batching: concurrent searches of one space merged into one call per shard.

A query goes out at once while fewer than ``window`` batched calls are in flight; otherwise
it waits, with the queries arriving meanwhile, until a call returns, ``max_batch`` queries
are waiting, or the oldest has waited ``max_wait_s``. So a lone query pays nothing, and
under load one FAISS call (and one actor call per shard) serves many queries.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from vifusion._limits import within

ShardResult = tuple[np.ndarray, np.ndarray, np.ndarray]  # scores (nq,k), ids (nq,k), times (nq,k,2)
# start(queries, k) sends a batched call to every shard and returns how to wait for the results.
Start = Callable[[np.ndarray, int], Callable[[], list[ShardResult]]]


class _Call:
    """One batched call in flight; the first of its queries to ask collects the results."""

    def __init__(self, wait: Callable[[], list[ShardResult]], done: Callable[[], None]) -> None:
        self._wait, self._done = wait, done
        self._lock = threading.Lock()
        self._collected = False
        self._results: list[ShardResult] = []
        self._error: BaseException | None = None

    def results(self) -> list[ShardResult]:
        with self._lock:
            if not self._collected:
                try:
                    self._results = self._wait()
                except BaseException as e:  # every query of the call sees the failure
                    self._error = e
                self._collected = True
                self._done()
        if self._error is not None:
            raise self._error
        return self._results


@dataclass
class _Request:
    queries: np.ndarray
    k: int
    arrived: float = field(default_factory=time.monotonic)
    sent: threading.Event = field(default_factory=threading.Event)
    call: _Call | None = None
    offset: int = 0


class QueryBatcher:
    """Thread-safe; one dispatcher thread per batcher (a daemon, stopped by ``close``)."""

    def __init__(self, start: Start, max_batch: int, window: int, max_wait_s: float) -> None:
        """``max_batch``: most queries in one batched call; ``window``: batched calls in flight
        before queries wait; ``max_wait_s``: longest a query waits to join one."""
        within("max_batch", max_batch, 1)
        within("window", window, 1)
        within("max_wait_s", max_wait_s, 0.0)
        self._start = start
        self.max_batch = max_batch
        self.window = window
        self.max_wait_s = max_wait_s
        self._cond = threading.Condition()
        self._queue: list[_Request] = []
        self._in_flight = 0
        self._closed = False
        self.calls = 0  # batched calls sent, for stats and tests
        self._thread = threading.Thread(target=self._dispatch, name="query-batching", daemon=True)
        self._thread.start()

    def search(self, queries: np.ndarray, k: int) -> list[ShardResult]:
        """Each shard's top-k rows for these queries, as if they had been sent alone."""
        req = _Request(queries, k)
        with self._cond:
            if self._closed:
                raise RuntimeError("QueryBatcher is closed")
            self._queue.append(req)
            self._cond.notify_all()
        req.sent.wait()
        rows = slice(req.offset, req.offset + len(queries))
        return [(s[rows, :k], i[rows, :k], t[rows, :k]) for s, i, t in req.call.results()]

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _finished(self) -> None:
        with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()

    def _take(self) -> list[_Request] | None:
        with self._cond:
            while True:
                if self._queue:
                    waiting = sum(len(r.queries) for r in self._queue)
                    age = time.monotonic() - self._queue[0].arrived
                    if (
                        self._in_flight < self.window
                        or waiting >= self.max_batch
                        or age >= self.max_wait_s
                        or self._closed
                    ):
                        break
                    self._cond.wait(self.max_wait_s - age)
                elif self._closed:
                    return None
                else:
                    self._cond.wait()
            taken, rows = [], 0
            while self._queue and (
                not taken or rows + len(self._queue[0].queries) <= self.max_batch
            ):
                req = self._queue.pop(0)
                taken.append(req)
                rows += len(req.queries)
            self._in_flight += 1
            self.calls += 1
            return taken

    def _dispatch(self) -> None:
        while (taken := self._take()) is not None:
            queries = (
                taken[0].queries if len(taken) == 1 else np.concatenate([r.queries for r in taken])
            )
            k = max(r.k for r in taken)
            try:
                wait = self._start(queries, k)
            except BaseException as e:

                def wait(e: BaseException = e) -> list[ShardResult]:
                    raise e

            call = _Call(wait, self._finished)
            offset = 0
            for r in taken:
                r.call, r.offset = call, offset
                offset += len(r.queries)
                r.sent.set()
