"""Link monitor: what one sender sees of the path to one destination, measured from the
transfers themselves.

Each message is stamped when sent; its acknowledgement carries the destination's time
serving it and its running total of busy time, so the network part of a round trip is
``ack - send - the destination's busy time in between``, with no clock shared between nodes.
From those stamps (rates in bytes/s, times in seconds):

- **delivery rate**: BBR's rate sample as a windowed max; app-limited and receiver-limited
  samples only ever raise it;
- **min RTT**: the least network round trip over a window, from *quiet* messages (small,
  nothing ahead of them); ``rtt_stale`` once the last is older than ``drain_every_s``, so
  the sender drains to one ``min_bytes`` message (BBR's PROBE_RTT);
- **queueing delay**: a round trip minus min RTT and the time its bytes and those ahead of
  it need at the recent capacity;
- **path rate**: bytes / (RTT - min RTT) of messages sent alone, valid while app-limited;
- **logical rate**: deliveries in uncompressed bytes, windowed max (over the capacity
  window: what the data needed; and over the rate window: what it needs now);
- **backlog age**: the oldest item waiting at the sender (the sender reports it);
- **receiver share**: the smoothed part of round trips the destination spent busy;
- **per-message cost**: the larger (not the sum) of the send call and a small message's
  cost at the destination, the least over the round-trip window.

An idle link gets a tiny probe after ``probe_idle_s`` (``due_probe``). Why each rule, and
the figures: docs/benchmarks.md, "How the link monitor measures".
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from vifusion._limits import ordered, within

_PATH_MIN_BYTES = 16 << 10  # smaller messages time the call's overhead, not the path
_RECEIVER_LIMITED = 0.5  # a message that spent more of its round trip at a busy destination


def _high(samples: list[float]) -> float:
    """A windowed "max" that one outlier cannot set: acknowledgements that arrive bunched
    give rate samples above the line rate. The 80th percentile (the max of a few samples)
    of ``samples``, sorted."""
    if not samples:
        return 0.0
    return (
        samples[min(len(samples) - 1, int(0.8 * len(samples)))]
        if len(samples) >= 5
        else samples[-1]
    )


class _WindowMin:
    """The least value over a sliding time window, in O(1) per sample (a monotonic deque):
    a window holds thousands of messages at 1 Gbit, and the sender reads it several times per
    message."""

    def __init__(self) -> None:
        self._q: deque[tuple[float, float]] = deque()  # (t, value), values increasing

    def append(self, t: float, value: float) -> None:
        while self._q and self._q[-1][1] >= value:
            self._q.pop()
        self._q.append((t, value))

    def expire(self, now: float, window: float) -> None:
        while len(self._q) > 1 and now - self._q[0][0] > window:  # the newest stands, however old
            self._q.popleft()

    def value(self) -> float:
        return self._q[0][1] if self._q else 0.0


class _Samples:
    """Timestamped rate samples over a window, also kept sorted, so their ``_high`` is a
    lookup: the sender reads a link's statistics several times per message, and at 1 Gbit a
    minute's window holds thousands of rate samples (sorting them on each acknowledgement
    cost 0.3 ms a message; sorting the last second's, for the delivery rate, was still 12%
    of the node aggregator's time holding the GIL)."""

    def __init__(self) -> None:
        self._q: deque[tuple[float, float]] = deque()  # (t, value), oldest first
        self._sorted: list[float] = []

    def append(self, t: float, rate: float) -> None:
        self._q.append((t, rate))
        bisect.insort(self._sorted, rate)

    def expire(self, now: float, window: float) -> None:
        # Keep the newest sample even when old: a quiet link still has its last measure.
        while len(self._q) > 1 and now - self._q[0][0] > window:
            _, rate = self._q.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, rate)]

    def high(self) -> float:
        return _high(self._sorted)


@dataclass(frozen=True)
class LinkStats:
    """One snapshot of a link; rates in bytes/s, times in seconds."""

    delivery_rate: float  # windowed max over `rate_window_s` (0 until measured)
    capacity: float  # windowed max over `capacity_window_s`: what the link carried when clear
    path_rate: float  # recent bottleneck estimate, valid while app-limited (0 until measured)
    logical_rate: float  # windowed max of uncompressed bytes/s delivered (capacity window)
    min_rtt: float  # network round trip without queues (0 until measured)
    queueing_delay: float  # smoothed, see the module docstring
    backlog_age: float  # age of the oldest item waiting at the sender
    in_flight_bytes: int
    in_flight: int  # messages sent, not yet acknowledged
    acked_bytes: int
    acked_messages: int
    service_s: float  # smoothed time the destination spends on a message
    per_message_s: (
        float  # fixed cost of one message (send call or the destination's part), windowed min
    )
    rtt_stale: bool = (
        False  # no quiet sample for `drain_every_s`: drain to one message (see module doc)
    )
    receiver_share: float = 0.0  # smoothed share of a round trip the destination was busy
    recent_logical_rate: float = 0.0  # logical rate over `rate_window_s` (0: not measured)


@dataclass
class _Sent:
    nbytes: int
    logical: int
    t_send: float
    ahead: int  # bytes in flight before this one
    delivered: int  # bytes acknowledged when this was sent
    logical_delivered: int
    t_delivered: float  # time of that last acknowledgement
    first_sent: float  # when the message acknowledged then had been sent
    app_limited: bool
    submit_s: float
    busy: float | None  # the destination's busy total as last reported when this was sent


class LinkMonitor:
    """Statistics of one (sender, destination) link. Not thread-safe: one owner."""

    def __init__(
        self,
        rate_window_s: float = 1.0,  # seconds the delivery rate is the windowed max over
        capacity_window_s: float = 60.0,  # seconds the capacity is the max over (>= rate_window_s)
        rtt_window_s: float = 30.0,  # seconds min RTT and the per-message cost are the least over
        probe_idle_s: float = 1.0,  # seconds idle before a probe is due
        drain_every_s: float = 4.0,  # seconds without a quiet sample before a drain
        min_bytes: int = 64 << 10,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``min_bytes``: the size of the sender's smallest batch, which it drains with."""
        within("rate_window_s", rate_window_s, 0.0, above_low=True)
        ordered("rate_window_s", rate_window_s, "capacity_window_s", capacity_window_s)
        within("rtt_window_s", rtt_window_s, 0.0, above_low=True)
        within("probe_idle_s", probe_idle_s, 0.0)
        within("drain_every_s", drain_every_s, 0.0, above_low=True)
        within("min_bytes", min_bytes, 1)
        self.rate_window_s = rate_window_s
        self.capacity_window_s = capacity_window_s
        self.rtt_window_s = rtt_window_s
        self.probe_idle_s = probe_idle_s
        self.drain_every_s = drain_every_s
        self.min_bytes = min_bytes
        self._clock = clock
        self._sent: dict[int, _Sent] = {}
        self._next = 0
        self._delivered = 0
        self._logical = 0
        self._t_delivered = self._first_sent = clock()
        self._rates = _Samples()  # over the capacity window
        self._recent_rates = _Samples()  # the same samples, over the rate window
        self._logical_rates = _Samples()
        self._recent_logical = _Samples()  # the same samples, over the rate window
        self._rtts = _WindowMin()  # network round trips of quiet samples (only their least is read)
        self._quiet_t: float | None = None  # when the last quiet sample came in
        self._path: deque[float] = deque(maxlen=5)
        self._costs = _WindowMin()  # the send call or the destination's part, per small message
        self._qdelay = 0.0
        self._receiver_share = 0.0
        self._busy: float | None = None  # the destination's busy total, last reported
        self._service = 0.0
        self._acked_messages = 0
        self._in_flight_bytes = 0
        self._last_activity = clock()
        self._backlog_age = 0.0

    def on_send(
        self, nbytes: int, logical: int | None = None, *, backlog: bool, submit_s: float = 0.0
    ) -> int:
        """Record a message leaving; returns a token for ``on_ack``. ``logical``: its size
        uncompressed (default ``nbytes``). ``backlog``: more was waiting behind it, so the
        sample it yields measures the link, not the sender."""
        now = self._clock()
        if not self._sent:
            # Idle until now: measure the next interval from this send, not from the last ack.
            self._t_delivered = self._first_sent = now
        token = self._next
        self._next += 1
        self._sent[token] = _Sent(
            nbytes,
            nbytes if logical is None else logical,
            now,
            self._in_flight_bytes,
            self._delivered,
            self._logical,
            self._t_delivered,
            self._first_sent,
            not backlog,
            submit_s,
            self._busy,
        )
        self._in_flight_bytes += nbytes
        self._last_activity = now
        return token

    def on_ack(
        self, token: int, service_s: float = 0.0, fixed_s: float = 0.0, busy_s: float | None = None
    ) -> None:
        """Record the destination's acknowledgement of a message (``service_s``: how long it
        spent on it, ``fixed_s``: what the message cost it, e.g. its CPU time and a log sync
        it waited for, ``busy_s``: its running total of time spent serving; all reported by
        the destination)."""
        s = self._sent.pop(token)
        now = self._clock()
        # The destination's busy time since this was sent: its own service and the service of
        # the messages it waited behind there (from the total known at send: an upper bound,
        # so a busy destination is never taken for a congested link).
        receiver_s = service_s
        if busy_s is not None:
            if s.busy is not None:
                receiver_s = max(busy_s - s.busy, service_s)
            self._busy = busy_s if self._busy is None else max(self._busy, busy_s)
        elapsed = max(now - s.t_send, 1e-6)
        receiver_s = min(receiver_s, elapsed)
        self._in_flight_bytes -= s.nbytes
        self._delivered += s.nbytes
        self._logical += s.logical
        self._t_delivered = now
        self._first_sent = s.t_send
        self._acked_messages += 1
        self._last_activity = now
        # Over the longer of the ack and the send interval: acknowledgements that come
        # bunched (messages queued at the destination) read faster than anything was sent.
        interval = max(now - s.t_delivered, s.t_send - s.first_sent)
        if interval > 0:
            rate = (self._delivered - s.delivered) / interval
            limited = s.app_limited or receiver_s > _RECEIVER_LIMITED * elapsed
            if not limited or rate > self.delivery_rate:
                self._rates.append(now, rate)
                self._recent_rates.append(now, rate)
            logical = (self._logical - s.logical_delivered) / interval
            self._logical_rates.append(now, logical)
            self._recent_logical.append(now, logical)
        rtt = max(elapsed - receiver_s, 1e-6)
        small = s.nbytes <= 2 * self.min_bytes
        if small and not s.ahead:  # quiet: the path's own round trip
            self._rtts.append(now, rtt)
            self._quiet_t = now
        # Probes carry no data and cost the destination nothing; the first message pays for
        # Ray's first call to the actor (0.8-1.4 ms against 0.5-0.9 for a drain after it).
        if small and s.logical and self._acked_messages > 1:
            self._costs.append(now, max(s.submit_s, fixed_s))
        self._expire(now)
        excess = rtt - self.min_rtt
        if not s.ahead and s.nbytes >= _PATH_MIN_BYTES and excess - s.submit_s > 1e-4:
            self._path.append(s.nbytes / (excess - s.submit_s))
        expected = (s.ahead + s.nbytes) / self.capacity if self.capacity else 0.0
        sample = max(excess - expected, 0.0)
        first = self._acked_messages == 1
        self._service = service_s if first else 0.8 * self._service + 0.2 * service_s
        self._qdelay = sample if first else 0.7 * self._qdelay + 0.3 * sample
        share = receiver_s / elapsed
        self._receiver_share = share if first else 0.7 * self._receiver_share + 0.3 * share

    def on_lost(self, token: int) -> None:
        """A message that failed (its destination died): forget it."""
        s = self._sent.pop(token, None)
        if s is not None:
            self._in_flight_bytes -= s.nbytes

    def set_backlog_age(self, age_s: float) -> None:
        self._backlog_age = age_s

    def due_probe(self) -> bool:
        """True when the link has been idle long enough that a probe should refresh min RTT."""
        return not self._sent and self._clock() - self._last_activity >= self.probe_idle_s

    @property
    def delivery_rate(self) -> float:
        self._recent_rates.expire(
            self._clock(), self.rate_window_s
        )  # the newest stands, however old
        return self._recent_rates.high()

    @property
    def capacity(self) -> float:
        return self._rates.high()

    @property
    def min_rtt(self) -> float:
        return self._rtts.value()

    def stats(self) -> LinkStats:
        self._expire(self._clock())
        return LinkStats(
            delivery_rate=self.delivery_rate,
            capacity=self.capacity,
            path_rate=sorted(self._path)[len(self._path) // 2] if self._path else 0.0,
            logical_rate=self._logical_rates.high(),
            min_rtt=self.min_rtt,
            queueing_delay=self._qdelay,
            backlog_age=self._backlog_age,
            in_flight_bytes=self._in_flight_bytes,
            in_flight=len(self._sent),
            acked_bytes=self._delivered,
            acked_messages=self._acked_messages,
            service_s=self._service,
            per_message_s=self._costs.value(),
            rtt_stale=self._quiet_t is None or self._clock() - self._quiet_t > self.drain_every_s,
            receiver_share=self._receiver_share,
            recent_logical_rate=self._recent_logical.high(),
        )

    def _expire(self, now: float) -> None:
        self._rates.expire(now, self.capacity_window_s)
        self._recent_rates.expire(now, self.rate_window_s)
        self._logical_rates.expire(now, self.capacity_window_s)
        self._recent_logical.expire(now, self.rate_window_s)
        self._rtts.expire(now, self.rtt_window_s)
        self._costs.expire(now, self.rtt_window_s)
