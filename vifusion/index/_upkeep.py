"""A shard's background worker: one daemon thread running its snapshots and rebuilds.

A task already queued is not queued twice. A task that fails is reported on stdout and
dropped: the shard keeps serving, and its next write schedules the task again.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

Task = tuple[str, "str | None"]  # ("snapshot", None) or ("rebuild", space)


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
