from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import pytest

from tests._helpers import refusal
from vifusion.index.batching import QueryBatcher


class FakeShards:
    """Two 'shards' whose answer for query row x is a function of x: a split error would show."""

    def __init__(self, hold: threading.Event | None = None) -> None:
        self.calls: list[int] = []
        self.hold = hold

    def start(self, queries: np.ndarray, k: int):
        self.calls.append(len(queries))

        def wait():
            if self.hold is not None:
                self.hold.wait()
            base = queries[:, :1] * 10 + np.arange(k)
            return [
                (
                    base.astype(np.float32) + s,
                    base.astype(np.int64) + 100 * s,
                    np.zeros(base.shape + (2,), np.float32),
                )
                for s in range(2)
            ]

        return wait


@contextmanager
def batching(start, **limits) -> Iterator[QueryBatcher]:
    """A QueryBatcher sending its calls to ``start``, closed when the block ends."""
    b = QueryBatcher(start, **limits)
    try:
        yield b
    finally:
        b.close()


def test_a_lone_query_goes_out_at_once_and_gets_its_own_rows() -> None:
    shards = FakeShards()
    with batching(shards.start, max_batch=64, window=1, max_wait_s=10.0) as b:
        out = b.search(np.array([[3.0]], np.float32), 2)  # would hang for 10 s if it waited
        assert [r[1].tolist() for r in out] == [[[30, 31]], [[130, 131]]]
        assert shards.calls == [1]


def test_queries_arriving_while_a_call_is_in_flight_share_the_next_call() -> None:
    hold = threading.Event()
    shards = FakeShards(hold)
    with batching(shards.start, max_batch=64, window=1, max_wait_s=60.0) as b:
        with ThreadPoolExecutor(20) as pool:
            first = pool.submit(b.search, np.array([[0.0]], np.float32), 1)
            while not shards.calls:
                pass
            rest = [
                pool.submit(b.search, np.full((1 + i % 3, 1), i, np.float32), 1 + i % 4)
                for i in range(1, 20)
            ]
            while sum(len(r.queries) for r in b._queue) < sum(1 + i % 3 for i in range(1, 20)):
                pass  # all nineteen wait behind the call in flight
            hold.set()
            assert first.result()[0][1].tolist() == [[0]]
            for i, f in enumerate(rest, start=1):
                per_shard = f.result()
                for s, (_scores, ids, _) in enumerate(per_shard):
                    assert ids.shape == (1 + i % 3, 1 + i % 4)
                    assert (ids == i * 10 + np.arange(1 + i % 4) + 100 * s).all()
        assert shards.calls == [1, sum(1 + i % 3 for i in range(1, 20))]


def test_max_batch_splits_a_backlog() -> None:
    hold = threading.Event()
    shards = FakeShards(hold)
    with batching(shards.start, max_batch=4, window=1, max_wait_s=60.0) as b:
        with ThreadPoolExecutor(12) as pool:
            futures = [pool.submit(b.search, np.full((1, 1), i, np.float32), 1) for i in range(12)]
            while len(shards.calls) < 2:  # the backlog reached max_batch: a call went out early
                pass
            hold.set()
            assert [f.result()[0][1][0, 0] for f in futures] == [10 * i for i in range(12)]
        assert max(shards.calls) <= 4 and sum(shards.calls) == 12


def test_a_failed_call_fails_every_query_in_it_and_the_next_call_works() -> None:
    state = {"fail": True}

    def start(queries, k):
        if state["fail"]:
            state["fail"] = False
            raise RuntimeError("shard gone")
        return FakeShards().start(queries, k)

    with batching(start, max_batch=8, window=1, max_wait_s=0.01) as b:
        with pytest.raises(RuntimeError, match="shard gone"):
            b.search(np.zeros((1, 1), np.float32), 1)
        assert b.search(np.ones((1, 1), np.float32), 1)[0][1].tolist() == [[10]]
    with pytest.raises(RuntimeError, match="closed"):
        b.search(np.zeros((1, 1), np.float32), 1)


@pytest.mark.parametrize(
    "args, named",
    [
        (dict(max_batch=0, window=1, max_wait_s=0.01), ("max_batch=0",)),
        (dict(max_batch=8, window=0, max_wait_s=0.01), ("window=0",)),
        (dict(max_batch=8, window=1, max_wait_s=-1.0), ("max_wait_s=-1.0",)),
    ],
)
def test_refuses_limits_out_of_range(args: dict, named: tuple[str, ...]) -> None:
    # A window of 0 would make every query wait max_wait_s, even alone: refused, not obeyed.
    message = refusal(QueryBatcher, start=FakeShards().start, **args)
    for text in named:
        assert text in message
