"""Whisper's encoder outputs kept for the last windows it heard. A non-English window is
heard up to five times by the multilingual model (its language, its candidates' hearings,
its transcription, its English rendering), and encoding a 30-s window is about half of a
hearing's CPU; the features of one window are the same each time, so its encoding is too.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

KEPT = 4  # windows kept: one window's hearings follow each other (a base encoding is ~3 MB)


class Encoded:
    """``encode`` (a faster_whisper.WhisperModel's) answering from the last ``KEPT``
    features it was given, by their bytes; install with ``model.encode = Encoded(model.encode)``."""

    def __init__(self, encode: Callable[[np.ndarray], Any]) -> None:
        self._encode = encode
        self._kept: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __call__(self, features: np.ndarray) -> Any:
        features = np.ascontiguousarray(features)
        key = (features.shape, hashlib.blake2b(features.tobytes(), digest_size=16).digest())
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                self.hits += 1
                return self._kept[key]
            self.misses += 1
        out = self._encode(features)
        with self._lock:
            self._kept[key] = out
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)
        return out

    def clear(self) -> None:
        """Forget every encoding kept."""
        with self._lock:
            self._kept.clear()
