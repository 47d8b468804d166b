"""A fixed-size ring of floats (the aggregator's recent latencies)."""

from __future__ import annotations

import numpy as np


class Ring:
    """The last ``size`` values of a stream (latencies), without a Python object each."""

    def __init__(self, size: int) -> None:
        self._a = np.zeros(size)
        self._n = 0

    def __len__(self) -> int:
        return min(self._n, len(self._a))

    def extend(self, x: np.ndarray) -> None:
        x = x[-len(self._a) :]
        at = self._n % len(self._a)
        head = min(len(x), len(self._a) - at)
        self._a[at : at + head] = x[:head]
        self._a[: len(x) - head] = x[head:]
        self._n += len(x)

    def values(self) -> np.ndarray:
        return self._a[: len(self)]
