"""A video's first audio track, decoded with PyAV to 16 kHz mono float32 (what Whisper takes).

``AudioReader`` decodes packet by packet and hands out windows of a few minutes, so a long
video never holds its whole track in memory; a window ends at the quietest moment of its last
seconds, so a word is rarely cut in two. Times are seconds on the video's clock (the audio's
start relative to the first video frame is kept).

Bad audio never raises: a missing track, a stream that cannot be decoded and silence are
reported in ``status`` / ``reason``, so the caller indexes the frames all the same and
passes the reason on as a warning.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import av
import numpy as np

from vifusion.extract.decode import DecodeError, open_container

SAMPLE_RATE = 16_000
WINDOW_S = 300.0  # audio per window handed to the caller (Whisper's features for 5 min: ~50 MB)
_CUT_SEARCH_S = 20.0  # a window ends at the quietest 0.1 s of its last 20 s (or quarter)
SILENCE_PEAK = 1e-3  # -60 dBFS: below this everywhere, the track holds nothing to hear
_MAX_BAD_SHARE = 0.5  # more undecodable packets than this share: the stream is broken, not glitched

Status = Literal["ok", "no_audio", "broken", "silent"]


@dataclass
class AudioReport:
    """What happened to a file's audio. ``status``: ok (decoded; ``reason`` may still warn, say
    of a cap or a few bad packets), no_audio, broken, silent. ``reason``: one line for the
    job's warnings, None when there is nothing to say. ``duration_s``: audio decoded."""

    status: Status = "ok"
    reason: str | None = None
    duration_s: float = 0.0
    truncated: bool = False


def _first_audio_stream(
    container: av.container.InputContainer,
) -> av.audio.stream.AudioStream | None:
    return container.streams.audio[0] if container.streams.audio else None


def _video_start_s(container: av.container.InputContainer) -> float:
    """Start time of the first video stream: frame times in decode.py count from there."""
    for s in container.streams.video:
        if s.start_time is not None and s.time_base is not None:
            return float(s.start_time * s.time_base)
    return 0.0


def _why(e: Exception) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def _quiet_cut(pcm: np.ndarray, lo: int, hi: int) -> int:
    """Index in [lo, hi] at the middle of the quietest 0.1 s block (lowest energy)."""
    block = SAMPLE_RATE // 10
    n = (hi - lo) // block
    if n < 2:
        return hi
    energy = np.square(pcm[lo : lo + n * block]).reshape(n, block).sum(axis=1)
    return lo + int(np.argmin(energy)) * block + block // 2


class AudioReader:
    """Decode the first audio track of ``path``, at most ``max_duration_s`` of it; ``src``:
    what to open instead of the name (``fd_path`` of the video as its frames were read).

    Iterate ``windows()`` once; ``report`` is final after that (``status`` no_audio or broken
    is known at once where the file has no usable track)."""

    def __init__(
        self, path: Path, max_duration_s: float, window_s: float = WINDOW_S, src: str | None = None
    ) -> None:
        if not max_duration_s > 0 or not window_s > 0:
            raise ValueError(
                f"max_duration_s and window_s must be > 0, got {max_duration_s}, {window_s}"
            )
        self.path = Path(path)
        self.src = src or str(self.path)
        self.max_samples = int(max_duration_s * SAMPLE_RATE)
        self.window = int(window_s * SAMPLE_RATE)
        self.search = int(min(_CUT_SEARCH_S, window_s / 4) * SAMPLE_RATE)
        self.report = AudioReport()
        self._peak = 0.0
        self._origin_s: float | None = None  # where the first kept sample sits on the video's clock
        self._skip = 0  # samples still to drop (audio that starts before the video)
        self._total = 0  # samples handed out
        self._video_start_s = 0.0

    def _set(self, status: Status, reason: str) -> None:
        self.report.status, self.report.reason = status, f"{self.path.name}: {reason}"

    def windows(self) -> Iterator[tuple[float, np.ndarray]]:
        """Yield (start_s, samples): float32 mono 16 kHz, consecutive, covering the decoded audio."""
        parts: list[np.ndarray] = []  # decoded, not yet handed out (joined once a window is full)
        size, start_s = 0, 0.0
        for chunk_start, chunk in self._chunks():
            if not size:
                start_s = chunk_start
            parts.append(chunk)
            size += len(chunk)
            if size > self.window:
                pending = np.concatenate(parts)
                while len(pending) > self.window:
                    cut = _quiet_cut(pending, self.window - self.search, self.window)
                    yield start_s, pending[:cut]
                    start_s += cut / SAMPLE_RATE
                    pending = pending[cut:]
                parts, size = [pending], len(pending)
        if size:
            yield start_s, np.concatenate(parts)
        if self.report.status == "ok" and self.report.duration_s > 0 and self._peak < SILENCE_PEAK:
            self._set("silent", "audio track is silent")

    def _chunks(self) -> Iterator[tuple[float, np.ndarray]]:
        """Resampled audio as it is decoded: (start_s of the chunk's first sample, samples)."""
        try:  # the decoder's restricted open: the container's own file, nothing it names
            container = open_container(self.path, self.src)
        except DecodeError as e:
            self._set("broken", f"cannot open for audio: {e}")
            return
        with container:
            stream = _first_audio_stream(container)
            if stream is None:
                self._set("no_audio", "no audio track")
                return
            self._video_start_s = _video_start_s(container)
            resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
            packets = bad = 0
            error = broke_off = None
            try:
                for packet in container.demux(stream):
                    if packet.size == 0:
                        continue  # the demuxer's end-of-stream packet; the decoder is flushed below
                    packets += 1
                    try:
                        frames = stream.decode(packet)
                    except av.error.FFmpegError as e:
                        bad, error = bad + 1, _why(e)
                        continue
                    yield from self._take(frames, resampler)
                    if self.report.truncated:
                        break
            except av.error.FFmpegError as e:  # the container itself breaks off (a truncated file)
                broke_off = _why(e)
            if not self.report.truncated:
                try:
                    yield from self._take(stream.decode(None), resampler)
                except av.error.FFmpegError:
                    pass  # what the decoder still held is lost; what came before stands
                yield from self._take([None], resampler)  # the resampler's last samples
            self.report.duration_s = self._total / SAMPLE_RATE
            if packets == 0:
                self._set(
                    "no_audio" if broke_off is None else "broken",
                    "audio track holds no packets"
                    if broke_off is None
                    else f"cannot read audio: {broke_off}",
                )
            elif bad > _MAX_BAD_SHARE * packets or self._total == 0:
                self._set(
                    "broken",
                    f"broken audio stream ({bad} of {packets} packets undecodable: {error})",
                )
            elif bad:
                self._set(
                    "ok",
                    f"{bad} of {packets} audio packets undecodable ({error}); the rest transcribed",
                )
            elif broke_off is not None:
                self._set(
                    "ok", f"audio breaks off after {self.report.duration_s:.1f} s ({broke_off})"
                )
            elif self.report.truncated:
                self._set(
                    "ok",
                    f"audio past {self.max_samples / SAMPLE_RATE:.0f} s left out (audio_max_s)",
                )

    def _take(
        self, frames: list[av.AudioFrame | None], resampler: av.AudioResampler
    ) -> Iterator[tuple[float, np.ndarray]]:
        for frame in frames:
            if frame is not None and self._origin_s is None and frame.time is not None:
                origin = frame.time - self._video_start_s
                # Audio that starts before the first video frame: what precedes the frame is dropped.
                self._origin_s, self._skip = max(origin, 0.0), max(0, round(-origin * SAMPLE_RATE))
            for out in resampler.resample(frame):
                # A decoder fed garbage can return values far outside [-1, 1], or NaN.
                pcm = np.clip(np.nan_to_num(out.to_ndarray().reshape(-1)), -1.0, 1.0)
                if self._skip:
                    n = min(self._skip, len(pcm))
                    pcm, self._skip = pcm[n:], self._skip - n
                room = self.max_samples - self._total
                if len(pcm) > room:
                    pcm, self.report.truncated = pcm[:room], True
                if len(pcm):
                    yield (self._origin_s or 0.0) + self._total / SAMPLE_RATE, pcm
                    self._peak = max(self._peak, float(np.abs(pcm).max()))
                    self._total += len(pcm)


def read_audio(path: Path, max_duration_s: float) -> tuple[float, np.ndarray, AudioReport]:
    """The whole track at once (for short files): (start_s, samples, report)."""
    reader = AudioReader(path, max_duration_s)
    windows = list(reader.windows())
    start_s = windows[0][0] if windows else 0.0
    samples = np.concatenate([w for _, w in windows]) if windows else np.zeros(0, np.float32)
    return start_s, samples, reader.report
