"""A shard's background worker: one daemon thread running its snapshots and rebuilds.

A task already queued is not queued twice. A task that fails is reported on stdout and
dropped: the shard keeps serving, and its next write schedules the task again.

Rebuilds of the shards beside each other in one index folder (one machine's) take turns
(``one_rebuild_at_a_time``): a rebuild holds a sample and a piece of its space as floats
beside both indexes, and four at once ran a 24 GiB machine out of memory.
"""

from __future__ import annotations

import fcntl
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

Task = tuple[str, "str | None"]  # ("snapshot", None) or ("rebuild", space)
TURNS = ".rebuild-turns.lock"  # beside the shard directories


@contextmanager
def one_rebuild_at_a_time(shard_directory: Path) -> Iterator[None]:
    """Hold the turn of the shards beside ``shard_directory`` (waits for it)."""
    with open(Path(shard_directory).parent / TURNS, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class Worker:
    """Runs ``run(task)`` for each scheduled task, in order, on its own thread."""

    def __init__(self, label: str, thread: str, run: Callable[[Task], None]) -> None:
        self._label = label  # names the owner in failure reports
        self._run = run
        self._tasks: queue.Queue[Task] = queue.Queue()
        self._pending: set[Task] = set()
        threading.Thread(target=self._work, name=thread, daemon=True).start()

    def schedule(self, task: Task) -> None:
        """Queue ``task`` unless it is queued already."""
        if task not in self._pending:
            self._pending.add(task)
            self._tasks.put(task)

    def wait_idle(self) -> None:
        """Return once the tasks scheduled so far are done."""
        self._tasks.join()

    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            try:
                self._pending.discard(task)
                self._run(task)
            except Exception as e:  # keep serving; the next write schedules it again
                print(f"{self._label}: {task[0]} failed: {e!r}", flush=True)
            finally:
                self._tasks.task_done()
