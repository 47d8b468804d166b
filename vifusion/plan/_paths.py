"""What ``simulate.py`` models of an aggregator's path to a shard: its fusion buffer, in row
counts (the real ``FusionBuffer.due`` and ``nbytes``), and what it knows of the link (the
real ``LinkStats`` and ``CodecPolicy``, and the monitor's windowed samples)."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from vifusion.comm.adaptive import CodecPolicy, Rung
from vifusion.comm.codec import Ladder
from vifusion.comm.link import LinkStats, _Samples
from vifusion.fusion.buffer import FRAME_BYTES, FusionBuffer
from vifusion.plan._events import Sim

RUNGS = tuple(
    Rung(c.name, c.bytes_per_row) for c in Ladder().codecs
)  # fp32, fp16, int8 (no tables)


_RATE_WINDOW_S, _CAPACITY_WINDOW_S = 1.0, 60.0  # LinkMonitor's defaults


class RowBuffer(FusionBuffer):
    """A fusion buffer of row counts, not rows: ``due`` and ``nbytes`` are the real ones.
    Rows are fractional (dedup keeps a share of the frames), so ``len`` rounds up."""

    def __len__(self) -> int:
        return math.ceil(self._rows - 1e-9)

    def add_rows(self, rows: float, video: int, arrived: float, extracted: float) -> None:
        self._chunks.append(Rows(rows, video, arrived, extracted))
        self._rows += rows

    def take_rows(self, max_bytes: int) -> list[Rows]:
        want = min(self._rows, max(1, max_bytes // FRAME_BYTES))
        out: list[Rows] = []
        while want > 1e-9 and self._chunks:
            c = self._chunks[0]
            n = min(c.rows, want)
            out.append(Rows(n, c.video, c.arrived, c.extracted))
            c.rows -= n
            want -= n
            self._rows -= n
            if c.rows <= 1e-9:
                self._chunks.popleft()
        return out


@dataclass
class Rows:
    rows: float
    video: int
    arrived: float
    extracted: float


class Link:
    """One aggregator's path to one shard: its buffer and what it knows of the path."""

    def __init__(
        self, sim: Sim, rate: float, rtt: float, message_cs: float, floor: int = 0
    ) -> None:
        self.rate, self.rtt, self.message_cs = rate, rtt, message_cs
        self.buffer = RowBuffer()
        self.in_flight = 0
        self.in_flight_bytes = 0
        self.acked = 0
        self.service_s = 0.0
        self.qdelay = 0.0
        self.urgent = False
        self.timer: float | None = None
        self.policy = CodecPolicy(RUNGS, floor=floor, clock=lambda: sim.now)  # the sim's clock
        # rows acknowledged over the last second, and the logical rate's samples (rows/s
        # over that second at each acknowledgement) in the monitor's two windows
        self._acked_rows: deque[tuple[float, float]] = deque()
        self._logical_rates, self._recent_logical = _Samples(), _Samples()

    def on_ack(self, now: float, rows: float) -> None:
        """Count ``rows`` acknowledged now toward the logical rate, as ``LinkMonitor`` does:
        a sample each acknowledgement, its windowed high read in ``stats``."""
        self.acked += 1
        self._acked_rows.append((now, rows))
        while self._acked_rows[0][0] < now - _RATE_WINDOW_S:
            self._acked_rows.popleft()
        span = max(now - self._acked_rows[0][0], _RATE_WINDOW_S / 10)
        rate = sum(r for _, r in self._acked_rows) / span * RUNGS[0].bytes_per_row
        for samples, window in (
            (self._logical_rates, _CAPACITY_WINDOW_S),
            (self._recent_logical, _RATE_WINDOW_S),
        ):
            samples.append(now, rate)
            samples.expire(now, window)

    def stats(self, now: float) -> LinkStats:
        measured = self.rate if self.acked else 0.0
        oldest = self.buffer.oldest()
        return LinkStats(
            delivery_rate=measured,
            capacity=measured,
            path_rate=measured,
            logical_rate=self._logical_rates.high(),
            recent_logical_rate=self._recent_logical.high(),
            min_rtt=self.rtt,
            queueing_delay=self.qdelay,
            backlog_age=now - oldest if oldest is not None else 0.0,
            in_flight_bytes=self.in_flight_bytes,
            in_flight=self.in_flight,
            acked_bytes=0,
            acked_messages=self.acked,
            service_s=self.service_s,
            per_message_s=self.message_cs,
            rtt_stale=False,
        )

    def wire_ratio(self) -> float:
        return RUNGS[self.policy.level].bytes_per_row / RUNGS[0].bytes_per_row
