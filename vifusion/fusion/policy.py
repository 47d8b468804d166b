"""The fusion policy: per destination, from the link's statistics, the bytes a fused
transfer carries (B), how long an item may wait for it (T), and the transfers in flight.

- **B** (wire bytes): big enough that a message's fixed cost (``per_message_s``) is at most
  ``overhead_share`` of its transfer time at the link's capacity; at most a quarter of the
  latency target's worth of the delivery rate; within [``min_bytes``, ``max_bytes``]. A B
  within twice ``inline_bytes`` is cut to ride inline in the actor call (not on the stream).
- **T**: a quarter of the latency target.
- **window**: one bandwidth-delay product (the slowest stage's rate x a batch's round trip)
  plus one ``min_bytes`` message, in messages of B, rounded up; within [``min_window``,
  ``max_window``]. Sized from the capacity, so it cannot talk itself down.
- A link's first message, and any while its min RTT is stale (``rtt_stale``), goes alone at
  ``min_bytes``: it re-measures the path and the per-message cost.

Why each rule: docs/benchmarks.md, "How the fusion policy's rules were found".
"""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass

from vifusion._limits import ordered, within
from vifusion.comm.link import LinkStats

_HEADROOM = 4 << 10  # a batch's ids and times ride with its features


@dataclass(frozen=True)
class FlushPlan:
    max_bytes: int  # flush when the buffer holds this many (uncompressed) bytes
    max_age_s: float  # flush when the oldest item is this old
    window: int  # transfers in flight to this destination


@dataclass(frozen=True)
class FlushPolicy:
    """Plans B, T and the window per link (see the module's docstring). Refuses, with a
    ValueError naming the values, limits out of order or out of range."""

    latency_target_s: float = 0.2  # extraction -> searchable; T is a quarter of it
    _: KW_ONLY
    overhead_share: float = 0.1  # most of a transfer's time its fixed cost may take, in (0, 1]
    min_bytes: int = 64 << 10  # smallest B (wire bytes); also the drain and probe message
    max_bytes: int = 8 << 20  # largest B (wire bytes)
    min_window: int = 2  # fewest transfers in flight per destination
    max_window: int = 64  # most transfers in flight per destination
    inline_bytes: int = 96 << 10  # Ray's default limit, less what a call adds

    def __post_init__(self) -> None:
        within("latency_target_s", self.latency_target_s, 0.0, above_low=True)
        within("overhead_share", self.overhead_share, 0.0, 1.0, above_low=True)
        within("min_bytes", self.min_bytes, 0)
        ordered("min_bytes", self.min_bytes, "max_bytes", self.max_bytes)
        within("max_bytes", self.max_bytes, 1)
        within("min_window", self.min_window, 1)
        ordered("min_window", self.min_window, "max_window", self.max_window)
        within("inline_bytes", self.inline_bytes, 0)

    def plan(
        self, link: LinkStats | None, wire_ratio: float = 1.0, by_stream: bool = False
    ) -> FlushPlan:
        """The plan for a link; ``wire_ratio`` = wire bytes / uncompressed bytes now;
        ``by_stream``: its batches travel on the shard stream, not by actor call."""
        age = self.latency_target_s / 4
        rate = link.delivery_rate if link else 0.0
        if not rate:  # nothing measured yet: a modest batch, alone on the link
            return FlushPlan(self.min_bytes, age, 1)
        if link.rtt_stale:  # drain: one small message alone times the path and the fixed cost
            return FlushPlan(int(self.min_bytes / wire_ratio), age, 1)
        capacity = max(link.capacity, rate)
        wire = link.per_message_s * capacity / self.overhead_share
        wire = min(wire, rate * self.latency_target_s / 4)
        wire = min(max(wire, self.min_bytes), self.max_bytes)
        if not by_stream and self.inline_bytes < wire < 2 * self.inline_bytes:
            wire = self.inline_bytes - _HEADROOM
        # A batch's round trip, and the rate of the pipe's slowest stage: the link, or a
        # destination that takes longer to serve a batch than the link takes to carry it.
        round_trip = (
            link.min_rtt
            + link.service_s
            + link.per_message_s
            + max(wire - self.min_bytes, 0) / capacity
        )
        pipe = min(capacity, wire / link.service_s) if link.service_s else capacity
        window = math.ceil((pipe * round_trip + self.min_bytes) / wire)
        window = min(max(window, self.min_window), self.max_window)
        return FlushPlan(int(wire / wire_ratio), age, window)
