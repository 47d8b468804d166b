"""Run an iterator ahead in a background thread, so producing item n+1 (decoding) overlaps
consuming item n (embedding). PyAV (FFmpeg) and torch both do their work in native code, so the
two really run at once."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")
_END = object()


def prefetch(items: Iterator[T], depth: int = 2) -> Iterator[T]:
    """Yield what ``items`` yields, produced up to ``depth`` items ahead. An exception in
    the producer is raised here, in order. Closing this generator stops the producer."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        q.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put((_END, None))
        except BaseException as e:  # handed to the consumer
            q.put((_END, e))

    worker = threading.Thread(target=produce, name="prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item, error = q.get()
            if error is not None:
                raise error
            if item is _END:
                return
            yield item
    finally:
        stop.set()
        worker.join(timeout=5)
