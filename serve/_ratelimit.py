"""Requests per API key: a token bucket per key, refilled continuously."""

import threading
import time


class RateLimiter:
    """``rate`` requests per second sustained, ``burst`` at once, per key."""

    def __init__(self, rate: float, burst: int, clock=time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, last refill)
        self.configure(rate, burst)

    def configure(self, rate: float, burst: int) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"need rate > 0 and burst >= 1, got {rate}, {burst}")
        with self._lock:
            self.rate, self.burst = float(rate), int(burst)
            self._buckets.clear()

    def take(self, key: str) -> float:
        """0.0 if the request may go, else the seconds until it could."""
        now = self._clock()
        with self._lock:
            tokens, last = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens >= 1:
                self._buckets[key] = (tokens - 1, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1 - tokens) / self.rate
