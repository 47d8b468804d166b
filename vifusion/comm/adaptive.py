"""Adaptive compression: which codec of the ladder a link gets, from its measured statistics.

Exact fp32 is the default and stays so on a clear link, however busy: one with room for what
the sender offers, or one its sender's CPU cannot fill. Congestion is seen in ``samples``
acknowledgements in a row of any of:

- the queueing delay (see ``link.py``) above ``delay_s``;
- while data waits, the delivery rate below ``drop`` of the capacity (what the link carried
  over the last minute); or the oldest waiting item older than ``backlog_s`` while the
  delivery rate is below ``sag`` of it;
- **saturation**: for most of the last ``backlog_s``, the oldest waiting item older than the
  link takes to carry ``backlog_messages`` of the messages in flight. A sender its CPU bounds
  sends each batch as it fills; rows wait longer only for room in a window the link drains,
  and then fewer bytes a row move more rows. "Most of the time": a descheduled sender's
  moment does not count, nor a drain (``rtt_stale``: the sender holds data back itself).
  Once compressed for it, a link that delivers over ``sag`` of its capacity while rows wait
  at all is still saturated (its batches, sized up, no longer show it in age).

Not while the destination spent over ``receiver_bound`` of recent round trips serving: then
it, not the link, holds the data. The policy then goes straight to the least lossy codec
whose bytes fit: the rows/s the link carried (its logical rate) in the codec's bytes, under
``headroom`` of what the link carries now (the path rate, at most the delivery rate), where
encoding a row costs less than it saves on the wire. For saturation, less than
1/``encode_margin`` of it, at the link's capacity: at 1 Gbit the two are alike, and the CPU
that would encode is the one the link waits for (a codec not yet timed is tried, and left
at once if it does not pay). So a saturated link steps down one codec at a time, as each
carries more rows. The ladder holds only the codecs that keep recall (the transport's
``allowed``, from ``codec_min_recall``).

After ``calm_s`` without congestion it steps back one level, and again after each further
``calm_s``, unless the link is squeezed (the path rate, measured while the compressed data
fits, and the delivery rate both below ``drop`` of the capacity) or has no room for the less
compressed codec (the last second's rows in its bytes over ``headroom`` of the capacity).

It never goes below ``floor``, where it also starts: a plan's least level for a link it
knows is too narrow for exact rows, which the policy would otherwise learn from congestion.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vifusion._limits import ordered, within
from vifusion.comm.link import LinkStats

# Samples at a level before its encoding's timing is trusted: the sender's average (over
# its batches) starts at the first batch, which pays for warming up.
_TIMED_AFTER = 10


@dataclass(frozen=True)
class Rung:
    """What the policy knows of one codec: its name and exact wire bytes per row."""

    name: str
    bytes_per_row: int


class CodecPolicy:
    """Chooses the ladder level for one link. Level 0 must be the exact codec."""

    def __init__(
        self,
        rungs: Sequence[Rung],
        *,
        enabled: bool = True,
        delay_s: float = 0.1,  # queueing delay (seconds) that counts as congestion
        backlog_s: float = 0.5,  # age (seconds) of the oldest waiting item past which a sag counts
        sag: float = 0.8,  # share of the capacity under which an old backlog counts, in [drop, 1]
        samples: int = 3,  # congested acknowledgements in a row before escalating
        calm_s: float = 0.75,  # seconds without congestion before each step back
        drop: float = 0.5,  # share of the capacity under which any backlog counts, in [0, sag]
        headroom: float = 0.9,  # share of what the link carries now a codec's bytes may fill, in (0, 1]
        receiver_bound: float = 0.5,  # destination's busy share past which it, not the link, holds data
        backlog_messages: float = 1.5,  # link times of a message the oldest waiting item may wait
        encode_margin: float = 10.0,  # saturated: wire time saved a row / its encoding, at least
        floor: int = 0,  # the least compressed level it may use (``vifusion plan``'s codec floor)
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        within("delay_s", delay_s, 0.0, above_low=True)
        within("backlog_s", backlog_s, 0.0)
        within("sag", sag, 0.0, 1.0)
        within("drop", drop, 0.0, 1.0)
        ordered("drop", drop, "sag", sag)
        within("samples", samples, 1)
        within("calm_s", calm_s, 0.0)
        within("headroom", headroom, 0.0, 1.0, above_low=True)
        within("receiver_bound", receiver_bound, 0.0, 1.0)
        within("backlog_messages", backlog_messages, 0.0, above_low=True)
        within("encode_margin", encode_margin, 1.0)
        within("floor", floor, 0, len(rungs) - 1)
        self.rungs = list(rungs)
        self.enabled = enabled
        self.delay_s = delay_s
        self.backlog_s = backlog_s
        self.sag = sag
        self.samples = samples
        self.calm_s = calm_s
        self.drop = drop
        self.headroom = headroom
        self.receiver_bound = receiver_bound
        self.backlog_messages = backlog_messages
        self.encode_margin = encode_margin
        self._clock = clock
        self.floor = floor
        self.level = floor
        self._streak = 0
        now = clock()
        self._last_congested = now
        self._last_change = now
        self._queued = 0.0  # share of the last backlog_s in which items queued for the link
        self._queued_t = now
        self._relieved = False  # the level is one a saturated link took (``relief``)
        self._samples_here = 0  # samples taken at this level
        self.history: list[tuple[float, int]] = [(now, floor)]

    def congested(self, link: LinkStats) -> bool:
        """Congestion that calls for compression: the link carries far less than it did while
        data waits, or somewhat less while data has waited long, or the queueing delay is
        high; and the destination is not what holds the data back."""
        if link.receiver_share > self.receiver_bound:
            return False
        slowed = link.backlog_age > 0 and link.delivery_rate < self.drop * link.capacity
        sagging = (
            link.backlog_age > self.backlog_s and link.delivery_rate < self.sag * link.capacity
        )
        return slowed or sagging or link.queueing_delay > self.delay_s

    def saturated(self, link: LinkStats) -> bool:
        """Items queue at the sender for the link: for most of the last ``backlog_s`` the
        oldest has waited longer than the link takes to carry ``backlog_messages`` of the
        messages in flight (the samples ``update`` took). A sender its CPU bounds sends each
        batch as it fills and waits for no window."""
        return link.receiver_share <= self.receiver_bound and self._queued > 0.5

    def _average_queue(self, link: LinkStats, now: float) -> None:
        """Fold one sample into the time-weighted share of samples in which items queued for
        the link (none while nothing is in flight, or while the sender drains)."""
        queued = False
        if not link.rtt_stale and link.in_flight and link.in_flight_bytes and link.delivery_rate:
            message_s = link.in_flight_bytes / link.in_flight / link.delivery_rate
            queued = link.backlog_age > self.backlog_messages * message_s
            # Compressed for saturation, a link still delivering its capacity while rows wait
            # is still what holds them (its batches, sized up, no longer show it in age).
            queued |= (
                self._relieved
                and link.backlog_age > 0
                and link.delivery_rate >= self.sag * link.capacity
            )
        weight = 1.0 - math.exp(-(now - self._queued_t) / self.backlog_s) if self.backlog_s else 1
        self._queued += weight * (queued - self._queued)
        self._queued_t = now

    def room(self, link: LinkStats) -> bool:
        """The link has room for the next less compressed codec: the rows it carried over the
        last second, in that codec's bytes, fit ``headroom`` of its capacity (unmeasured: yes)."""
        if not (self.level and link.recent_logical_rate and link.capacity):
            return True
        rows_per_s = link.recent_logical_rate / self.rungs[0].bytes_per_row
        return (
            rows_per_s * self.rungs[self.level - 1].bytes_per_row <= self.headroom * link.capacity
        )

    def squeezed(self, link: LinkStats) -> bool:
        """The path measured now is well under the link's capacity: no time to step back, even
        while the compressed data fits. A link that delivers over ``drop`` of its capacity is
        not squeezed whatever an older path sample says (they come only from messages sent
        alone, which a busy sender seldom sends)."""
        if not (link.path_rate and link.capacity):
            return False
        return (
            link.path_rate < self.drop * link.capacity
            and link.delivery_rate < self.drop * link.capacity
        )

    def update(self, link: LinkStats, encode_s_per_row: Sequence[float] = ()) -> int:
        """Take one sample (call it once per acknowledgement); returns the level to use."""
        if not self.enabled:
            return self.level
        now = self._clock()
        self._average_queue(link, now)
        self._samples_here += 1
        if (
            self._relieved
            and self._samples_here >= _TIMED_AFTER
            and self.level not in self._paying(link, encode_s_per_row)
        ):
            # a codec taken for saturation before its encoding was timed, which does not pay
            self._set(self.relief(link, encode_s_per_row), now)
            self._relieved = self.level > self.floor
        congested = self.congested(link)
        if congested or self.saturated(link):
            self._streak += 1
            self._last_congested = now
            if self._streak >= self.samples:
                fit = self.fit if congested else self.relief
                target = fit(link, encode_s_per_row)
                if target > self.level:
                    self._set(target, now)
                    self._relieved = not congested
        else:
            self._streak = 0
            if self.squeezed(link) or not self.room(link):
                self._last_congested = now
            calm = min(now - self._last_congested, now - self._last_change)
            if self.level > self.floor and calm >= self.calm_s:
                self._set(self.level - 1, now)
        return self.level

    def fit(self, link: LinkStats, encode_s_per_row: Sequence[float] = ()) -> int:
        """The least lossy level whose bytes fit the link now and whose encoding pays for
        itself; the most compressed one if none fits."""
        rate = _rate_now(link)
        exact = self.rungs[0].bytes_per_row
        for level, rung in enumerate(self.rungs):
            if level and rate and level < len(encode_s_per_row):
                saved_s = (exact - rung.bytes_per_row) / rate
                if encode_s_per_row[level] >= saved_s:
                    continue
            if self._fits(level, link):
                return level
        return len(self.rungs) - 1

    def relief(self, link: LinkStats, encode_s_per_row: Sequence[float] = ()) -> int:
        """For a saturated link: as ``fit``, the least lossy level whose bytes fit (the most
        compressed if none does), of the codecs whose encoding costs under 1/``encode_margin``
        of the wire time it saves a row; the exact one if none pays."""
        paying = self._paying(link, encode_s_per_row)
        return next((level for level in paying if self._fits(level, link)), max(paying, default=0))

    def _paying(self, link: LinkStats, encode_s_per_row: Sequence[float]) -> list[int]:
        """The lossy levels whose encoding (untimed: yes) costs under 1/``encode_margin`` of
        the wire time it saves a row at the link's capacity."""
        exact = self.rungs[0].bytes_per_row
        return [
            level
            for level in range(1, len(self.rungs))
            if not (link.capacity and level < len(encode_s_per_row))
            or self.encode_margin * encode_s_per_row[level]
            < (exact - self.rungs[level].bytes_per_row) / link.capacity
        ]

    def _fits(self, level: int, link: LinkStats) -> bool:
        rate = _rate_now(link)
        if not rate or not link.logical_rate:
            return level == 0
        rows_per_s = link.logical_rate / self.rungs[0].bytes_per_row
        return rows_per_s * self.rungs[level].bytes_per_row <= self.headroom * rate

    def _set(self, level: int, now: float) -> None:
        self.level = max(level, self.floor)
        self._samples_here = 0
        self._relieved = False
        self._last_change = now
        self._streak = 0
        self.history.append((now, self.level))


def _rate_now(link: LinkStats) -> float:
    """What the link carries now, for choosing a codec while it is congested: the path rate
    (valid while compressed data fits and the sender is app-limited), but no more than the
    delivery rate. Path samples come only from messages sent alone, a few seconds apart
    under load, so in the first seconds of a squeeze the path rate is the one from before
    it, while a congested link's delivery rate is the squeezed path (data waits: the
    sender is not what limits it)."""
    rates = [r for r in (link.path_rate, link.delivery_rate) if r]
    return min(rates, default=0.0)
