"""Text shown on screen (slides, signs, captions, code) as timed spans, read with RapidOCR.

A frame is read only where the picture changed since the last frame read, and at least
every ``ocr_still_interval_s``; otherwise it shows what the last reading showed. Where the
last reading found no text, the detector alone first looks at the frame shrunk to
``ocr_gate_side``, with a full reading at least every ``ocr_full_interval_s``. A reading keeps
(``readable``) lines at or above ``ocr_min_confidence`` with two letters or digits and no word
mixing two scripts. The same line (letters compared without case or spaces, a character or
two apart) on consecutive readings is one span. Why: docs/benchmarks.md, "Design notes moved
from docstrings".
"""

from __future__ import annotations

import difflib
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from PIL import Image

from vifusion.config import Config
from vifusion.extract._ocr import Line, LineReader

THUMB_SIZE = (160, 90)  # (w, h) of the change test's greyscale thumbnail
_CHANGED_LEVELS = 32  # a thumbnail pixel that moved this many grey levels has changed
_SAME_LINE_RATIO = 0.9  # difflib ratio between two readings' keys that makes them one line


@dataclass(frozen=True)
class TextSpan:
    """``text`` on screen over [start_s, end_s); ``confidence``: its best reading's."""

    start_s: float
    end_s: float
    text: str
    confidence: float


def _script(ch: str) -> str | None:
    if not ch.isalpha():
        return None
    name = unicodedata.name(ch, "")
    return "CJK" if name.startswith(("CJK", "HIRAGANA", "KATAKANA")) else name.split(" ", 1)[0]


def readable(line: Line, min_confidence: float) -> bool:
    """Whether a line read is kept (see the module's docstring)."""
    if line.confidence < min_confidence or sum(ch.isalnum() for ch in line.text) < 2:
        return False
    return all(len({s for s in map(_script, word) if s}) <= 1 for word in line.text.split())


def line_key(text: str) -> str:
    """What two readings of one line share: the characters, without case or spaces."""
    return "".join(text.casefold().split())


def thumbnail(rgb: np.ndarray) -> np.ndarray:
    """The change test's view of a frame: (90, 160) greyscale, int16."""
    return np.asarray(Image.fromarray(rgb).convert("L").resize(THUMB_SIZE, Image.BOX), np.int16)


def ocr_device() -> str:
    """ "cuda" where onnxruntime has its CUDA provider (the onnxruntime-gpu wheel), else "cpu"."""
    import onnxruntime

    return "cuda" if "CUDAExecutionProvider" in onnxruntime.get_available_providers() else "cpu"


class ScreenReader:
    """RapidOCR on ``cfg``'s threads (or CUDA, see ocr_device). Not thread-safe; one per actor."""

    def __init__(self, cfg: Config, device: str | None = None) -> None:
        self.cfg = cfg
        self.device = device or ocr_device()
        self.lines = LineReader(cfg.ocr_threads or cfg.threads, cuda=self.device == "cuda")

    def read(self, rgb: np.ndarray) -> list[Line]:
        """The readable lines of one (h, w, 3) uint8 RGB frame, top to bottom."""
        return [ln for ln in self.lines.read(rgb) if readable(ln, self.cfg.ocr_min_confidence)]

    def sees_text(self, rgb: np.ndarray) -> bool:
        """The gate (``ocr_gate_side``): whether the detector marks text on the shrunk frame."""
        side = self.cfg.ocr_gate_side
        return side == 0 or self.lines.sees_text(rgb, side)

    def track(self) -> ScreenTextTracker:
        """A tracker for one video's sampled frames, in order."""
        return ScreenTextTracker(self)

    def spans(self, frames: Iterable[tuple[np.ndarray, float, float]]) -> list[TextSpan]:
        """All the spans of one video's (frame, start_s, end_s), in order of their end."""
        tracker = self.track()
        out: list[TextSpan] = []
        for rgb, start_s, end_s in frames:
            out += tracker.add(rgb, start_s, end_s)
        return out + tracker.finish()


@dataclass
class _Open:
    start_s: float
    end_s: float
    key: str
    text: str
    confidence: float


class ScreenTextTracker:
    """Feeds one video's sampled frames to a ScreenReader, reading only those it must, and
    turns the readings into spans. ``frames_read`` counts the frames read, ``frames_gated``
    those the gate looked at and found no text on (see the module's docstring)."""

    def __init__(self, reader: ScreenReader) -> None:
        self.reader = reader
        self.frames_read = 0
        self.frames_gated = 0
        self._last_full_s: float | None = None
        self._open: list[_Open] = []
        self._last_thumb: np.ndarray | None = None
        self._last_read_s: float | None = None

    def _must_read(self, rgb: np.ndarray, start_s: float, changed: bool | None) -> bool:
        cfg = self.reader.cfg
        if self._last_thumb is None or changed:
            return True
        if start_s - self._last_read_s >= cfg.ocr_still_interval_s:
            return True
        if changed is False:  # the caller's word that the picture did not change
            return False
        moved = np.abs(thumbnail(rgb) - self._last_thumb) > _CHANGED_LEVELS
        return float(moved.mean()) > cfg.ocr_change_share

    def add(
        self, rgb: np.ndarray, start_s: float, end_s: float, changed: bool | None = None
    ) -> list[TextSpan]:
        """Take the next frame, shown over [start_s, end_s). ``changed``: the caller's own
        test (True: read it; False: read it only if the still interval has passed); None:
        this tracker compares thumbnails. Returns the spans that ended before this frame."""
        if not self._must_read(rgb, start_s, changed):
            for span in self._open:
                span.end_s = end_s
            return []
        self._last_thumb, self._last_read_s = thumbnail(rgb), start_s
        if self._last_full_s is None:
            self._last_full_s = start_s
        full = self._open or start_s - self._last_full_s >= self.reader.cfg.ocr_full_interval_s
        if full or self.reader.sees_text(rgb):
            lines = self.reader.read(rgb)
            self.frames_read += 1
            self._last_full_s = start_s
        else:
            lines = []
            self.frames_gated += 1
        still: list[_Open] = []
        for line in lines:
            key = line_key(line.text)
            span = self._match(key)
            if span is None:
                span = _Open(start_s, end_s, key, line.text, line.confidence)
            else:
                self._open.remove(span)
                span.end_s = end_s
                if line.confidence > span.confidence:
                    span.text, span.confidence = line.text, line.confidence
            still.append(span)
        ended, self._open = self._open, still
        return [self._span(s) for s in ended]

    def _match(self, key: str) -> _Open | None:
        for span in self._open:
            if span.key == key:
                return span
        best = max(
            self._open,
            key=lambda s: difflib.SequenceMatcher(None, s.key, key).ratio(),
            default=None,
        )
        if (
            best is not None
            and difflib.SequenceMatcher(None, best.key, key).ratio() >= _SAME_LINE_RATIO
        ):
            return best
        return None

    def finish(self) -> list[TextSpan]:
        """The spans still open at the end of the video."""
        ended, self._open = self._open, []
        return [self._span(s) for s in ended]

    @staticmethod
    def _span(s: _Open) -> TextSpan:
        return TextSpan(
            round(float(s.start_s), 6),
            round(float(s.end_s), 6),
            s.text,
            round(float(s.confidence), 4),
        )
