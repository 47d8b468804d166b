"""How much longer CPU work takes than its CPU time on a busy machine: the time a thread
spends runnable, waiting for a core, from Linux's per-thread run-queue wait
(``/proc/thread-self/schedstat``). Waiting for a lock, the GIL or a socket is not counted."""

from __future__ import annotations

import os
import threading

_SCHEDSTAT = "/proc/thread-self/schedstat"


class _File:
    """The calling thread's schedstat, open while the thread lives (``threading.local``
    drops it when the thread ends)."""

    def __init__(self) -> None:
        self.fd = os.open(_SCHEDSTAT, os.O_RDONLY)  # /proc/thread-self names the opening thread
        self.last: tuple[float, float] | None = None

    def read(self) -> tuple[float, float]:
        on_cpu, waited = os.pread(self.fd, 64, 0).split()[:2]
        return int(on_cpu) / 1e9, int(waited) / 1e9

    def __del__(self) -> None:
        if hasattr(self, "fd"):  # not where the open failed
            os.close(self.fd)


class CoreWait:
    """The run-queue wait per CPU second of the threads that call ``stretch``, over their
    recent work: sums that decay by ``decay`` at each call. Thread-safe. Where the kernel
    does not say (not Linux, or no schedstat), the stretch is 1."""

    def __init__(self, decay: float = 0.998) -> None:
        self.decay = decay
        self._local = threading.local()
        self._lock = threading.Lock()
        self._cpu = self._wait = 0.0
        self._available = os.path.exists(_SCHEDSTAT)

    def stretch(self) -> float:
        """1 + the recent run-queue wait per CPU second, after adding the calling thread's
        CPU and wait since its last call: what CPU time is multiplied by to become time."""
        if self._available:
            try:
                f = getattr(self._local, "file", None) or _File()
                self._local.file = f
                now = f.read()
            except (OSError, ValueError):
                self._available = False
            else:
                last, f.last = f.last, now
                if last is not None:
                    with self._lock:
                        self._cpu = self.decay * self._cpu + now[0] - last[0]
                        self._wait = self.decay * self._wait + now[1] - last[1]
        return 1.0 + self._wait / self._cpu if self._cpu > 0 else 1.0
