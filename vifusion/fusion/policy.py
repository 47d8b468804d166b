"""The fusion policy: how many bytes a fused transfer carries, how long an item may wait for
it, and how many transfers may be in flight, per destination, from the link's statistics.

- **B (bytes)**: enough that the fixed cost of a message (the send call and the receiver's
  per-message work, measured from small messages, ``link.py``) is under ``overhead_share``
  of its transfer time at the link's capacity (not the delivery rate of the last second:
  smaller batches carry less, and a B sized from what they carried can shrink itself to the
  least); but no more than a quarter of the latency target's worth of what the link
  delivers now, and within [``min_bytes``, ``max_bytes``]. A B just past the size a message
  can ride inline in the actor call (``inline_bytes``, up to twice it) is cut to fit: the
  object store's extra round trips cost more than a few more KiB per message save (not on
  the shard stream, which has no such step).
- **T (age)**: a quarter of the latency target: a slow trickle still goes out in time.
- **window**: one bandwidth-delay product and one small message (``min_bytes``), in
  messages of B, rounded up: the rate of the pipe's slowest stage (the link's capacity, or
  the receiver's B / service time where that is less) x a batch's round trip (min RTT +
  the receiver's service time + the fixed per-message cost + the time by which a batch
  outlasts, on the wire, the small message that timed min RTT); within [``min_window``,
  ``max_window``]. Every message past that only waits in a queue (Little's law: latency =
  bytes in flight / rate): at 1 Gbit, pinned 512 KiB batches carried as much with two in
  flight as with three or four, at 13.5 ms against 17 and 18.6; a gain of 1.5 plus one
  message had kept four or five 1 MiB batches in flight (p50 45 ms). The small message
  more is the probe and the slack: a window that holds only what the link was measured to
  carry can never measure more (at 100 Mbit a window of two 64 KiB messages measured 63
  Mbit/s and kept it), and one round trip's jitter leaves it idle (a BDP of 2.8 such
  messages in a window of three carried 86% of the line, against 94% with four). Where B
  is large that slack is a fraction of a message, not the whole one (two 1 MiB batches
  more at 1 Gbit were 20 ms of p50). The window is sized from the capacity, not from what
  the window itself let through, so it cannot talk itself down. Two, the least, keeps one
  message at the receiver while the next travels.

While the link's min RTT is stale (``LinkStats.rtt_stale``: no message has gone out alone
for a while) the plan is one small message (``min_bytes``) in flight: the queue drains and
the next message measures the path itself, and the per-message cost (``link.py``). The
first message on a link goes out that way too.

B is counted in the bytes that cross the link: when the link carries compressed data, a
batch gathers more rows for the same B (``wire_ratio``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vifusion._limits import ordered, within
from vifusion.comm.link import LinkStats

_HEADROOM = 4 << 10  # a batch's ids and times ride with its features


@dataclass(frozen=True)
class FlushPlan:
    max_bytes: int  # flush when the buffer holds this many (uncompressed) bytes
    max_age_s: float  # flush when the oldest item is this old
    window: int  # transfers in flight to this destination


class FlushPolicy:
    """Plans B, T and the window per link (see the module's docstring). Refuses, with a
    ValueError naming the values, limits out of order or out of range."""

    def __init__(
        self,
        latency_target_s: float = 0.2,  # extraction -> searchable; T is a quarter of it
        *,
        overhead_share: float = 0.1,  # most of a transfer's time its fixed cost may take, in (0, 1]
        min_bytes: int = 64 << 10,  # smallest B (wire bytes); also the drain and probe message
        max_bytes: int = 8 << 20,  # largest B (wire bytes)
        min_window: int = 2,  # fewest transfers in flight per destination
        max_window: int = 64,  # most transfers in flight per destination
        inline_bytes: int = 96 << 10,  # Ray's default limit, less what a call adds
    ) -> None:
        within("latency_target_s", latency_target_s, 0.0, above_low=True)
        within("overhead_share", overhead_share, 0.0, 1.0, above_low=True)
        within("min_bytes", min_bytes, 0)
        ordered("min_bytes", min_bytes, "max_bytes", max_bytes)
        within("max_bytes", max_bytes, 1)
        within("min_window", min_window, 1)
        ordered("min_window", min_window, "max_window", max_window)
        within("inline_bytes", inline_bytes, 0)
        self.latency_target_s = latency_target_s
        self.overhead_share = overhead_share
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.min_window = min_window
        self.max_window = max_window
        self.inline_bytes = inline_bytes

    def plan(self, link: LinkStats | None, wire_ratio: float = 1.0, by_stream: bool = False) -> FlushPlan:
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
        round_trip = (link.min_rtt + link.service_s + link.per_message_s
                      + max(wire - self.min_bytes, 0) / capacity)
        pipe = min(capacity, wire / link.service_s) if link.service_s else capacity
        window = math.ceil((pipe * round_trip + self.min_bytes) / wire)
        window = min(max(window, self.min_window), self.max_window)
        return FlushPlan(int(wire / wire_ratio), age, window)
