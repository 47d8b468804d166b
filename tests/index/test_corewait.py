"""CoreWait: CPU time stretched by the time a thread waited for a core."""

import os
import subprocess
import sys
import time

import pytest

from vifusion.index import _corewait
from vifusion.index._corewait import CoreWait

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/thread-self/schedstat"), reason="no per-thread schedstat"
)


def spin(core_wait: CoreWait, seconds: float) -> float:
    """Busy for ``seconds`` of CPU, reading the stretch as a shard does after each batch."""
    stretch, end = 1.0, time.thread_time() + seconds
    while time.thread_time() < end:
        sum(range(20_000))
        stretch = core_wait.stretch()
    return stretch


@pytest.fixture
def one_core():
    """This thread on one core (the first it may use), restored after."""
    allowed = os.sched_getaffinity(0)
    core = min(allowed)
    os.sched_setaffinity(0, {core})
    yield core
    os.sched_setaffinity(0, allowed)


def test_work_that_shares_its_core_with_another_process_is_stretched(one_core):
    hog = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import os; os.sched_setaffinity(0, {{{one_core}}})\nwhile True: pass",
        ]
    )
    try:
        time.sleep(0.2)  # the other process is running
        shared = spin(CoreWait(), 0.3)
    finally:
        hog.kill()
        hog.wait()
    alone = spin(CoreWait(), 0.3)
    # two runnable tasks on one core: each waits about as long as it runs
    assert shared > 1.5
    assert alone < shared


def test_without_schedstat_the_stretch_is_one(monkeypatch):
    monkeypatch.setattr(_corewait, "_SCHEDSTAT", "/nonexistent/schedstat")
    core_wait = CoreWait()
    assert spin(core_wait, 0.05) == 1.0
