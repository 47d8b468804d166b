"""Text shown on screen (slides, signs, captions, code) as timed spans, read with RapidOCR.

A frame is read only where the picture changed since the last frame looked at, and at least
every ``ocr_still_interval_s``; otherwise it shows what the last reading showed. Where no text
is on screen, the detector alone first looks at the frame shrunk to ``ocr_gate_side`` (the
gate), and at least every ``ocr_full_interval_s`` at the frame's own size up to a reading's;
only a frame it sees text on is read. Where no text is on screen, the gate looks only at
every ``ocr_backoff_max``-th changed frame, and at a picture held still since the frame
before (camera footage moves in every frame; slides and title cards hold). Once it finds
text, the frames it skipped are looked at too, so a span starts where its text first showed,
and it looks at every changed frame again, then every 2nd, 4th, ... as looks find nothing.
A reading keeps (``readable``) lines at or above ``ocr_min_confidence`` with two letters or
digits and no word mixing two scripts. The reader (PP-OCRv4) reads Latin letters, digits and
Chinese (Japanese kanji and kana less well); a line in another script (Cyrillic, Greek,
Arabic, Hebrew, Devanagari, Armenian, Hangul ...) comes back as look-alike Latin letters,
some of them guessed (``foreign``), and is dropped and counted (``lines_foreign``), never
stored as nonsense. The same line (letters compared without case or
spaces, a character or two apart) on consecutive readings is one span. Why:
docs/benchmarks.md, "Design notes moved from docstrings".
"""

from __future__ import annotations

import difflib
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from vifusion.config import Config
from vifusion.extract._ocr import Line, LineReader

THUMB_SIZE = (160, 90)  # (w, h) of the change test's greyscale thumbnail
_CHANGED_LEVELS = 32  # a thumbnail pixel that moved this many grey levels has changed
_SAME_LINE_RATIO = 0.9  # difflib ratio between two readings' keys that makes them one line
_BACKOFF_LOOKS = 4  # looks in a row without text before the back-off's step doubles


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


# A line with a character read below this confidence is in a script the reader does not know.
# On slides (DejaVu Sans at 24 and 32 px; 2026-11-28), 23 of 24 readings of lines in Cyrillic,
# Greek, Arabic, Armenian and Hebrew had one (the other mixed scripts, dropped as such), 9
# of them at a mean confidence >= 0.85 that would have kept them; 48 readings of English,
# French, Spanish, German and Portuguese lines, accents included, had none (their least sure
# letters, accented ones, at 0.53 and more).
_UNSURE_CHAR = 0.5


def foreign(line: Line) -> bool:
    """Whether ``line`` reads as a script the reader does not know: a character read unsure
    (see the constants), or a letter of a script besides the two it reads (its look-alike
    guesses at Greek or Cyrillic include a few Greek letters, "Tplμnvlaiα")."""
    return any(c < _UNSURE_CHAR for c in line.char_confidences) or any(
        _script(ch) not in (None, "LATIN", "CJK") for ch in line.text
    )


def readable(line: Line, min_confidence: float) -> bool:
    """Whether a line read is kept (see the module's docstring)."""
    if foreign(line):
        return False
    if line.confidence < min_confidence or sum(ch.isalnum() for ch in line.text) < 2:
        return False
    return all(len({s for s in map(_script, word) if s}) <= 1 for word in line.text.split())


def line_key(text: str) -> str:
    """What two readings of one line share: the characters, without case or spaces."""
    return "".join(text.casefold().split())


def thumbnail(rgb: np.ndarray) -> np.ndarray:
    """The change test's view of a frame: (90, 160) greyscale, int16 (area-averaged, then
    ITU-R 601 luma: Pillow's ``convert("L")`` weights, a third of its time)."""
    import cv2

    small = cv2.resize(rgb, THUMB_SIZE, interpolation=cv2.INTER_AREA)
    return cv2.cvtColor(small, cv2.COLOR_RGB2GRAY).astype(np.int16)


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

    def read(self, rgb: np.ndarray, foreign_seen: set[str] | None = None) -> list[Line]:
        """The readable lines of one (h, w, 3) uint8 RGB frame, top to bottom; the lines in a
        script the reader does not know (``foreign``) go into ``foreign_seen``, by line key."""
        lines = self.lines.read(rgb)
        if foreign_seen is not None:
            foreign_seen.update(line_key(ln.text) for ln in lines if foreign(ln))
        return [ln for ln in lines if readable(ln, self.cfg.ocr_min_confidence)]

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


Picture = np.ndarray | Callable[[], np.ndarray]  # a frame, or a call that makes it


def _pixels(picture: Picture) -> np.ndarray:
    return picture if isinstance(picture, np.ndarray) else picture()


@dataclass(frozen=True)
class _Frame:
    """A frame as the tracker holds it: the one to read (made on first use) and a small one."""

    picture: Picture
    small: np.ndarray

    def full(self) -> np.ndarray:
        return _pixels(self.picture)


@dataclass
class _Open:
    start_s: float
    end_s: float
    key: str
    text: str
    confidence: float


class ScreenTextTracker:
    """Feeds one video's sampled frames to a ScreenReader, reading only those it must, and
    turns the readings into spans. Counts of the frames that changed: ``frames_read`` (read in
    full), ``frames_gated`` (looked at by the detector alone, no text seen), ``frames_skipped``
    (never looked at, by the back-off; see the module's docstring)."""

    def __init__(self, reader: ScreenReader) -> None:
        self.reader = reader
        self.frames_read = 0
        self.frames_gated = 0
        self.frames_skipped = 0
        self._foreign: set[str] = set()  # keys of lines dropped as in a script not read
        self._last_full_s: float | None = None
        self._open: list[_Open] = []
        self._last_thumb: np.ndarray | None = None  # of the last frame looked at
        self._prev_thumb: np.ndarray | None = None  # of the frame before this one
        self._last_read_s: float | None = None
        self._last_end_s = 0.0
        # Looks in a row that found no text: a video starts as if the gate had long found
        # none, so footage without text is looked at sparsely from its start.
        self._empty_looks = _BACKOFF_LOOKS * reader.cfg.ocr_backoff_max.bit_length()
        self._skipped: list[tuple[_Frame, float, float]] = []  # since the last look

    def _moved(self, a: np.ndarray, b: np.ndarray) -> bool:
        """Whether two thumbnails differ (``ocr_change_share`` of them by _CHANGED_LEVELS)."""
        moved = np.abs(a - b) > _CHANGED_LEVELS
        return float(moved.mean()) > self.reader.cfg.ocr_change_share

    def _changed(self, thumb: np.ndarray | None, start_s: float, changed: bool | None) -> bool:
        cfg = self.reader.cfg
        if self._last_thumb is None or changed:
            return True
        if start_s - self._last_read_s >= cfg.ocr_still_interval_s:
            return True
        if changed is False:  # the caller's word that the picture did not change
            return False
        return self._moved(thumb, self._last_thumb)

    def _step(self) -> int:
        """Look at every this many-th changed frame: 1, doubling after each _BACKOFF_LOOKS
        looks in a row without text, up to ``ocr_backoff_max``."""
        return min(self.reader.cfg.ocr_backoff_max, 2 ** (self._empty_looks // _BACKOFF_LOOKS))

    def add(
        self,
        rgb: Picture,
        start_s: float,
        end_s: float,
        changed: bool | None = None,
        small: np.ndarray | None = None,
    ) -> list[TextSpan]:
        """Take the next frame, shown over [start_s, end_s). ``rgb``: the frame to read, or a
        call that makes it (``decode.Deferred``: made only if it is read); ``small``: the
        same frame at about ``ocr_gate_side`` or more (the embedder's), which the change test
        and the gate look at instead where given. ``changed``: the caller's own test (True:
        read it; False: read it only if the still interval has passed); None: this tracker
        compares thumbnails. Returns the spans that ended before this frame. A frame the
        back-off skips is kept (not copied) until a later one is looked at: the caller must
        not write into it after handing it over."""
        self._last_end_s = end_s
        if small is None:
            rgb = small = _pixels(rgb)
        rgb = _Frame(rgb, small)
        thumb = thumbnail(small) if changed is None or self._last_thumb is None else None
        before, self._prev_thumb = self._prev_thumb, thumb
        if not self._changed(thumb, start_s, changed):
            for span in self._open:
                span.end_s = end_s
            return []
        first = self._last_full_s is None
        if first:
            self._last_full_s = start_s
        full_due = start_s - self._last_full_s >= self.reader.cfg.ocr_full_interval_s
        # A picture held still since the frame before (a slide, a title card, a static shot)
        # is looked at: the back-off is for camera footage, which moves in every frame.
        held = thumb is not None and before is not None and not self._moved(thumb, before)
        due = first or held or bool(self._open) or full_due
        if not due and len(self._skipped) + 1 < self._step():
            # Not looked at, and not the last frame looked at either: the next changed frame
            # is compared with the last one looked at, so a still slide is not missed.
            self._skipped.append((rgb, start_s, end_s))
            self.frames_skipped += 1
            return []
        self._last_thumb = thumbnail(small) if thumb is None else thumb
        self._last_read_s = start_s
        return self._look(rgb, start_s, end_s)

    def _look(self, rgb: _Frame, start_s: float, end_s: float) -> list[TextSpan]:
        """Look at (and where needed read) a frame; where it shows text, first the frames the
        back-off skipped before it, so a span starts where its text first showed."""
        lines = self._lines(rgb, start_s)
        skipped, self._skipped = self._skipped, []
        ended: list[TextSpan] = []
        if not lines:
            self._empty_looks += 1
        else:
            self._empty_looks = 0
            self.frames_skipped -= len(skipped)
            for s_rgb, s_start, s_end in skipped:
                ended += self._update(self._lines(s_rgb, s_start), s_start, s_end)
        return ended + self._update(lines, start_s, end_s)

    def _lines(self, rgb: _Frame, start_s: float) -> list[Line]:
        """A frame's readable lines: read in full where text is on screen, else first looked
        at by the gate, or every ``ocr_full_interval_s`` by the detector at the frame's own
        size (up to the reading's), for text too small for the gate."""
        reader, cfg = self.reader, self.reader.cfg
        if self._open:
            seen = True
        elif start_s - self._last_full_s >= cfg.ocr_full_interval_s:
            self._last_full_s = start_s
            full = rgb.full()
            seen = reader.lines.sees_text(full, min(*full.shape[:2], reader.lines.read_side))
        else:
            seen = reader.sees_text(rgb.small)
        if not seen:
            self.frames_gated += 1
            return []
        self.frames_read += 1
        self._last_full_s = max(self._last_full_s, start_s)  # frames skipped come after
        return reader.read(rgb.full(), self._foreign)

    @property
    def lines_foreign(self) -> int:
        """Distinct lines dropped as in a script the reader does not know (``foreign``)."""
        return len(self._foreign)

    def warning(self) -> str | None:
        """The job warning for lines dropped as in a script not read (None: none was)."""
        if not self._foreign:
            return None
        return (
            f"screen text: {len(self._foreign)} line(s) in a script the reader does not read "
            "(it reads Latin letters and Chinese) were left out"
        )

    def _update(self, lines: list[Line], start_s: float, end_s: float) -> list[TextSpan]:
        """Spans from one frame's lines: those continuing go on to ``end_s``, new ones open,
        and those not seen again end (returned)."""
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
        """The spans still open at the end of the video. The last changed frame the back-off
        skipped is looked at first (text shown only at the end is not lost)."""
        ended: list[TextSpan] = []
        if self._skipped:
            rgb, start_s, end_s = self._skipped.pop()
            self.frames_skipped -= 1
            ended = self._look(rgb, start_s, end_s)
        for span in self._open:  # to the end of the last frame, changed or not
            span.end_s = self._last_end_s
        ended, self._open = ended + [self._span(s) for s in self._open], []
        return ended

    @staticmethod
    def _span(s: _Open) -> TextSpan:
        return TextSpan(
            round(float(s.start_s), 6),
            round(float(s.end_s), 6),
            s.text,
            round(float(s.confidence), 4),
        )
