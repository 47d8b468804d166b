"""Transport: fused batches to shard actors over Ray, with a bounded in-flight window.

Sending does not wait for the shard: up to ``window`` batches per destination travel
while the sender goes on decoding and embedding (communication overlaps computation).
A batch counts as delivered only once the shard acknowledged it (its ``add`` returned).
This is the seam where link monitoring and codecs plug in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass

import ray
from ray.actor import ActorHandle

from vifusion.types import FusedBatch


@dataclass
class TransportStats:
    batches: int = 0
    frames: int = 0
    bytes: int = 0


class Transport:
    """Sends to `handle.add.remote(batch)`; at most ``window`` unacknowledged per destination."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.stats = TransportStats()
        self._in_flight: dict[Hashable, deque[ray.ObjectRef]] = {}

    def send(self, dest: Hashable, handle: ActorHandle, batch: FusedBatch) -> None:
        queue = self._in_flight.setdefault(dest, deque())
        while len(queue) >= self.window:
            ray.get(queue.popleft())  # raises if the shard failed: the caller's job fails
        queue.append(handle.add.remote(batch))
        self.stats.batches += 1
        self.stats.frames += len(batch)
        self.stats.bytes += batch.nbytes

    def drain(self, dest: Hashable) -> None:
        """Wait until every batch sent to ``dest`` is acknowledged."""
        queue = self._in_flight.get(dest)
        while queue:
            ray.get(queue.popleft())

    def abandon(self, dest: Hashable) -> None:
        """After a failed video: wait out what is in flight to ``dest``, ignoring its
        outcome, so the next video neither races it nor inherits its error."""
        queue = self._in_flight.pop(dest, None)
        if queue:
            ray.wait(list(queue), num_returns=len(queue))
