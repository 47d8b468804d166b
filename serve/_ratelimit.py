"""Requests per client: a token bucket per client key, refilled continuously."""

import threading
import time
from collections.abc import Hashable

_PRUNE_AT = 10_000  # buckets held before full ones (the same as none) are dropped


class RateLimiter:
    """``rate`` requests per second sustained, ``burst`` at once, per key (any hashable)."""

    def __init__(self, rate: float, burst: int, clock=time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[Hashable, tuple[float, float]] = {}  # key -> (tokens, last refill)
        self.configure(rate, burst)

    def configure(self, rate: float, burst: int) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"need rate > 0 and burst >= 1, got {rate}, {burst}")
        with self._lock:
            self.rate, self.burst = float(rate), int(burst)
            self._buckets.clear()

    def take(self, key: Hashable) -> float:
        """0.0 if the request may go, else the seconds until it could."""
        now = self._clock()
        with self._lock:
            if len(self._buckets) >= _PRUNE_AT:
                self._prune(now)
            tokens, last = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens >= 1:
                self._buckets[key] = (tokens - 1, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1 - tokens) / self.rate

    def _prune(self, now: float) -> None:
        """Drop the buckets that have refilled: many clients must not grow memory forever."""
        full_after = self.burst / self.rate
        self._buckets = {
            k: (t, last) for k, (t, last) in self._buckets.items() if now - last < full_after
        }

    def __len__(self) -> int:
        return len(self._buckets)
