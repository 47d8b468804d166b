"""Which language is spoken: a window cut into runs of one language, as Whisper names them.

The voiced audio (VAD) is cut into chunks of about ``CHUNK_S`` of speech, and the multilingual
model names each chunk's language. The first chunk's is the video's; where the model is
unsure of it (``LANGUAGE_SURE``), the chunk is heard in each of its likeliest languages and
the one heard most fluently (the highest mean token log-probability, no loop) is taken: a
model that half-hears Spanish as Greek writes Greek letters with less confidence than Spanish
words. A later chunk switches language only when the model is sure of it
(``SWITCH_CONFIDENCE``), so a short or mumbled stretch never flips a talk's language. Where
the library's languages are named (``speech_languages``), the model's probabilities are taken
over those alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vifusion.extract._decoding import REPEATING, token_limit
from vifusion.extract.audio import SAMPLE_RATE

CHUNK_S = 30.0  # voiced audio per language decision: what Whisper's encoder hears at once
SWITCH_CONFIDENCE = 0.8  # a chunk changes the language only where the model is this sure
LANGUAGE_SURE = 0.7  # a first chunk named less surely is heard in its likeliest languages:
CANDIDATES = 3  # at most this many,
CANDIDATE_P = 0.1  # each at least this likely


@dataclass(frozen=True)
class Run:
    """Samples [start, end) of a window, spoken in ``language``."""

    start: int
    end: int
    language: str


def language_runs(
    model,
    samples: np.ndarray,
    voiced: list[dict],
    language_before: str | None = None,
    among: tuple[str, ...] = (),
) -> list[Run]:
    """``samples`` (``voiced``: the VAD's spans of it) cut into runs of one language, as
    ``model`` (a multilingual faster_whisper.WhisperModel) names them, ``among`` those
    languages where given; ``language_before``: that of the audio just before, which an
    unsure chunk keeps."""
    runs: list[Run] = []
    for chunk in _chunks(voiced):
        audio = np.concatenate([samples[v["start"] : v["end"]] for v in chunk])
        found, p, ranked = named(model, audio, among)
        current = runs[-1].language if runs else language_before
        if current is None:
            language = _likeliest(model, audio, found, p, ranked)
        else:
            language = found if p >= SWITCH_CONFIDENCE else current
        start = runs[-1].end if runs else 0
        if runs and runs[-1].language == language:
            runs[-1] = Run(runs[-1].start, chunk[-1]["end"], language)
        else:
            if runs:  # the earlier run ends where this chunk's speech begins
                runs[-1] = Run(runs[-1].start, chunk[0]["start"], runs[-1].language)
                start = chunk[0]["start"]
            runs.append(Run(start, chunk[-1]["end"], language))
    if not runs:
        return [Run(0, len(samples), language_before or "en")]  # VAD heard nothing
    runs[-1] = Run(runs[-1].start, len(samples), runs[-1].language)
    return runs


def named(model, audio: np.ndarray, among: tuple[str, ...] = ()) -> tuple[str, float, list]:
    """``model``'s (language, probability, every language ranked) for voiced ``audio``;
    ``among`` given, only those languages, their probabilities scaled to sum to 1."""
    found, p, ranked = model.detect_language(audio=audio)
    if not among:
        return found, p, ranked
    kept = [(lang, q) for lang, q in ranked if lang in among]
    total = sum(q for _, q in kept) or 1.0
    kept = [(lang, q / total) for lang, q in kept]
    return kept[0][0], kept[0][1], kept


def _likeliest(
    model, audio: np.ndarray, found: str, p: float, ranked: list[tuple[str, float]]
) -> str:
    """The language of voiced ``audio`` that ``model`` named ``found`` with probability ``p``
    (``ranked``: every language, likeliest first): ``found`` where sure, else the candidate
    heard most fluently."""
    candidates = [lang for lang, q in ranked[:CANDIDATES] if q >= CANDIDATE_P]
    if p >= LANGUAGE_SURE or len(candidates) < 2:
        return found
    return max(candidates, key=lambda lang: fluency(model, audio, lang))


def fluency(model, audio: np.ndarray, language: str) -> float:
    """The mean token log-probability of one greedy hearing of voiced ``audio`` in
    ``language``; -inf where it loops or hears no words."""
    pieces, _ = model.transcribe(
        audio,
        language=language,
        temperature=0.0,
        beam_size=1,  # the greedy path ranks the candidates as beam search does, at 2/3 the time
        without_timestamps=True,
        condition_on_previous_text=False,
        max_new_tokens=token_limit(len(audio) / SAMPLE_RATE),
    )
    tokens, logprob = 0, 0.0
    for s in pieces:
        if s.compression_ratio > REPEATING:
            return float("-inf")
        tokens += len(s.tokens)
        logprob += s.avg_logprob * len(s.tokens)
    return logprob / tokens if tokens else float("-inf")


def _chunks(voiced: list[dict]) -> list[list[dict]]:
    """The VAD's voiced spans (sample ranges, in order) grouped into chunks of about CHUNK_S
    of speech each, the last one joining its predecessor where it is under half of that."""
    chunks: list[list[dict]] = []
    size = limit = int(CHUNK_S * SAMPLE_RATE)
    for v in voiced:
        if size >= limit:
            chunks.append([])
            size = 0
        chunks[-1].append(v)
        size += v["end"] - v["start"]
    if len(chunks) > 1 and size < limit // 2:
        chunks[-2] += chunks.pop()
    return chunks
