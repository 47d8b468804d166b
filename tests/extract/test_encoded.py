"""Whisper's encodings kept per window (``extract/_encoded.py``): the same features are
encoded once, other features each time, and only the last few are kept."""

from __future__ import annotations

import numpy as np

from vifusion.extract import _encoded
from vifusion.extract._encoded import Encoded


def counting():
    calls: list[np.ndarray] = []

    def encode(features: np.ndarray) -> np.ndarray:
        calls.append(features)
        return features.copy()

    return encode, calls


def test_a_window_heard_again_is_not_encoded_again():
    encode, calls = counting()
    cached = Encoded(encode)
    window = np.random.default_rng(0).random((80, 3000), dtype=np.float32)
    first = cached(window)
    assert cached(window.copy()) is first
    assert np.array_equal(first, window)
    assert len(calls) == 1
    other = window.copy()
    other[0, 0] += 1
    assert np.array_equal(cached(other), other)
    assert np.array_equal(cached(window[:, :-1]), window[:, :-1])  # another shape
    assert len(calls) == 3
    assert (cached.hits, cached.misses) == (1, 3)


def test_only_the_last_windows_are_kept():
    encode, calls = counting()
    cached = Encoded(encode)
    windows = [np.full((2, 4), i, np.float32) for i in range(_encoded.KEPT + 1)]
    for w in windows:
        cached(w)
    cached(windows[-1])
    assert len(calls) == _encoded.KEPT + 1
    cached(windows[0])  # dropped: encoded again
    assert len(calls) == _encoded.KEPT + 2


def test_forgotten_windows_are_encoded_again():
    encode, calls = counting()
    cached = Encoded(encode)
    window = np.ones((2, 4), np.float32)
    cached(window)
    cached.clear()
    cached(window)
    assert len(calls) == 2
