"""The language a window is named: Whisper's guess where it is sure, else the likeliest
language it hears most fluently. The model is a stand-in here (what it hears is given), so
the rule is what is tested; tests/extract/test_speech_languages.py runs the real model."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from vifusion.extract._language import language_runs
from vifusion.extract.audio import SAMPLE_RATE


class Heard:
    """A model that names ``ranked[0]`` and hears each language with the given mean token
    log-probability (a loop where ``looped``); it records what it was asked to decode."""

    def __init__(self, ranked, fluency, looped=()) -> None:
        self.ranked, self.fluency, self.looped, self.decoded = ranked, fluency, looped, []

    def detect_language(self, audio):
        return self.ranked[0][0], self.ranked[0][1], self.ranked

    def transcribe(self, audio, language, **_):
        self.decoded.append(language)
        ratio = 3.0 if language in self.looped else 1.2
        piece = SimpleNamespace(
            tokens=[1] * 10, avg_logprob=self.fluency[language], compression_ratio=ratio
        )
        return [piece], None


VOICE = np.zeros(10 * SAMPLE_RATE, np.float32)
SPANS = [{"start": SAMPLE_RATE, "end": 9 * SAMPLE_RATE}]


def test_a_sure_guess_is_taken_without_decoding() -> None:
    model = Heard([("es", 0.9), ("gl", 0.05)], {"es": -0.5, "gl": -0.1})
    assert [r.language for r in language_runs(model, VOICE, SPANS)] == ["es"]
    assert model.decoded == []


def test_an_unsure_guess_gives_way_to_the_language_heard_most_fluently() -> None:
    model = Heard(
        [("el", 0.42), ("es", 0.26), ("la", 0.11), ("gl", 0.09)],
        {"el": -0.5, "es": -0.29, "la": -0.39, "gl": -0.1},
    )
    assert [r.language for r in language_runs(model, VOICE, SPANS)] == ["es"]
    assert sorted(model.decoded) == ["el", "es", "la"]  # gl is too unlikely to be heard


def test_a_language_heard_as_a_loop_is_never_chosen() -> None:
    model = Heard([("en", 0.4), ("fr", 0.3)], {"en": -0.07, "fr": -0.23}, looped=("en",))
    assert [r.language for r in language_runs(model, VOICE, SPANS)] == ["fr"]


def test_a_later_window_keeps_the_language_before_unless_sure() -> None:
    model = Heard([("it", 0.6), ("es", 0.3)], {"it": -0.1, "es": -0.5})
    assert [r.language for r in language_runs(model, VOICE, SPANS, language_before="es")] == ["es"]
    assert model.decoded == []
