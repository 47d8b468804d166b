import threading

import pytest

from vifusion.extract._prefetch import prefetch


def test_yields_everything_in_order():
    assert list(prefetch(iter(range(100)), depth=3)) == list(range(100))


def test_producer_error_reaches_the_consumer_after_the_items_before_it():
    def items():
        yield 1
        yield 2
        raise ValueError("corrupt at frame 3")

    got = []
    with pytest.raises(ValueError, match="corrupt at frame 3"):
        for x in prefetch(items()):
            got.append(x)
    assert got == [1, 2]


def test_producer_runs_ahead_but_no_further_than_depth():
    produced = []
    gate = threading.Event()

    def items():
        for i in range(10):
            produced.append(i)
            yield i

    it = prefetch(items(), depth=2)
    assert next(it) == 0
    gate.wait(0.5)  # let the producer fill the queue
    # 1 handed out + 2 queued + 1 blocked on a full queue, at most
    assert 2 <= len(produced) <= 4
    it.close()
