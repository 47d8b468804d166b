"""How much Whisper may decode: one greedy decoding a window, its tokens bounded by the voice.

Whisper's own cure for a loop, decoding again at rising temperatures, cost up to six
decodings a window on speech it hears badly and rarely changed the words. So a window is
decoded once at temperature 0, at most ``TOKENS_PER_S`` tokens a second of voice (fast
speech makes about 5, so a loop ends at about twice what was said), and a segment that
loops (``REPEATING``) is dropped by the caller.
"""

from __future__ import annotations

import numpy as np

from vifusion.extract.audio import SAMPLE_RATE

REPEATING = 2.4  # a text this compressible (gzip) is a loop, as faster-whisper judges it
TOKENS_PER_S = 10
TOKENS_MIN = 16
WINDOW_S = 30.0  # what Whisper hears at once; its limit of tokens applies per window


def vad_spans(samples: np.ndarray) -> list[dict]:
    """The VAD's (Silero's) spans of speech in ``samples``: sample ranges, in order."""
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    return get_speech_timestamps(samples, VadOptions())


def voiced_s(voiced: list[dict], start: int, end: int) -> float:
    """Seconds of ``voiced`` (the VAD's sample ranges) inside samples [start, end)."""
    inside = sum(max(0, min(v["end"], end) - max(v["start"], start)) for v in voiced)
    return inside / SAMPLE_RATE


def token_limit(voice_s: float) -> int:
    """The tokens one window may decode, for ``voice_s`` seconds of voice."""
    return TOKENS_MIN + round(TOKENS_PER_S * min(voice_s, WINDOW_S))
