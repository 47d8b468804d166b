"""Speech in many languages: the multilingual model joined from its wheels, the language
detected and stored, each non-English segment rendered in English, subtitles naming their
language. Talks are spoken by espeak-ng and written as real mp4 / webm / mkv files."""

from __future__ import annotations

from pathlib import Path

import pytest

from vifusion.catalog import TextRow
from vifusion.config import Config
from vifusion.extract import _whisper_model
from vifusion.query.webvtt import webvtt
from vifusion.samples.talks import (
    AUDIO_RATE,
    SENTENCES,
    have_espeak,
    speak,
    voice_of,
    write_talk,
)

needs_espeak = pytest.mark.skipif(not have_espeak(), reason="espeak-ng is not installed")


def test_model_joined_once_checked_and_redone_when_damaged(tmp_path):
    d = _whisper_model.whisper_base_dir(tmp_path)
    model = d / "model.bin"
    assert model.stat().st_size == _whisper_model.MODEL_BIN_SIZE
    assert {p.name for p in d.iterdir()} >= {"config.json", "tokenizer.json", "vocabulary.json"}
    first = model.stat().st_mtime_ns
    assert _whisper_model.whisper_base_dir(tmp_path) == d
    assert model.stat().st_mtime_ns == first  # not joined again on the next start
    with open(model, "r+b") as f:  # a join cut short (a crash, a full disk)
        f.truncate(1000)
    _whisper_model.whisper_base_dir(tmp_path)
    assert model.stat().st_size == _whisper_model.MODEL_BIN_SIZE
    assert not [p for p in d.iterdir() if p.name.startswith(".part-")]


def test_a_join_that_does_not_match_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(_whisper_model, "MODEL_BIN_SHA256", "0" * 64)
    with pytest.raises(_whisper_model.DamagedModel, match="reinstall"):
        _whisper_model.whisper_base_dir(tmp_path)
    assert not (tmp_path / _whisper_model.NAME / "model.bin").exists()


def test_webvtt_names_the_language_and_gives_the_english_rendering():
    rows = [
        TextRow(
            1,
            "speech",
            0,
            0.5,
            2.0,
            "La estación está aquí.",
            language="es",
            english="The station is here.",
        ),
        TextRow(1, "speech", 1, 3.0, 4.0, "Hello there.", language="en"),
    ]
    original = webvtt(rows)
    assert original.splitlines()[:2] == ["WEBVTT", "Language: es"]
    assert "La estación está aquí." in original and "The station" not in original
    english = webvtt(rows, english=True)
    assert english.splitlines()[:2] == ["WEBVTT", "Language: en"]
    assert "The station is here." in english and "estación" not in english
    assert "Hello there." in english  # English rows as said
    assert webvtt([TextRow(1, "screen", 0, 0, 1, "x")]).splitlines()[:2] == ["WEBVTT", ""]


def test_searches_keep_videos_in_the_languages_asked(catalog):
    catalog = catalog.open()
    ids = []
    for lang in ("es", "en"):
        video_id, _ = catalog.add_video(f"/v/{lang}.mp4", lang, {})
        catalog.put_texts(video_id, "speech", [(0.0, 1.0, SENTENCES[lang][0], lang, None)])
        catalog.set_video_language(video_id, lang)
        catalog.update_job(catalog.latest_jobs([video_id])[video_id].id, "ready")
        ids.append(video_id)
    assert catalog.get_video(ids[0]).language == "es"
    assert catalog.ready_ids(languages=["es"]) == {ids[0]}
    assert catalog.ready_ids(languages=["es", "en"]) == set(ids)
    assert catalog.ready_ids(languages=["de"]) == set()
    # A video that switches: found by a language only some of its rows are in.
    catalog.put_texts(ids[1], "speech", [(0, 1, "Hello.", "en"), (5, 6, "Hallo.", "de")])
    assert catalog.ready_ids(languages=["de"]) == {ids[1]}


# -- through the real model (slow: ~5-15 s a talk on two busy cores) ----------------------

# A few words each transcript must hold (matched without case): the meaning came through.
KEY_WORDS = {
    "es": ("estación", "mercado", "ciudad", "montañas"),
    "fr": ("montagnes", "chaud", "demain"),
    "de": ("bahnhof", "markt", "bergen"),
    "it": ("stazione", "montagna", "città"),
    "pt": ("montanhas", "estação", "cidade"),
    "ru": ("рынком", "центре", "рядом"),
}
SUFFIX = {"es": ".mp4", "fr": ".webm", "de": ".mkv", "it": ".mp4", "pt": ".webm", "ru": ".mkv"}


@pytest.fixture(scope="module")
def transcriber(tmp_path_factory):
    from vifusion.extract.speech import Transcriber

    cfg = Config(data_dir=tmp_path_factory.mktemp("data"), speech_threads=2)
    return Transcriber(cfg, "cpu")


def _talk(tmp_path: Path, lang: str):
    first, second = SENTENCES[lang]
    return write_talk(
        tmp_path / f"{lang}{SUFFIX[lang]}",
        13.0,
        [(0.5, first), (6.5, second)],
        fps=2,
        language=lang,
    )


@pytest.mark.slow
@needs_espeak
@pytest.mark.parametrize("lang", ["es", "fr", "de", "it", "pt"])
def test_language_detected_and_transcribed_in_it(transcriber, tmp_path, lang):
    out = transcriber.transcribe_file(_talk(tmp_path, lang).path)
    assert out.language == lang
    assert out.segments and {s.language for s in out.segments} == {lang}
    said = " ".join(s.text for s in out.segments).lower()
    assert any(w in said for w in KEY_WORDS[lang]), said
    assert all(s.english for s in out.segments)  # rendered in English beside the original


@pytest.mark.slow
@needs_espeak
def test_a_forced_language_is_transcribed_in_it(transcriber, tmp_path):
    """espeak-ng's Russian is not told apart by Whisper base (it names Polish or Norwegian),
    so a deployment that knows its language says so: the words come out in Cyrillic."""
    cfg = transcriber.cfg
    transcriber.cfg = cfg.model_copy(update={"speech_language": "ru"})
    try:
        out = transcriber.transcribe_file(_talk(tmp_path, "ru").path)
    finally:
        transcriber.cfg = cfg
    assert {s.language for s in out.segments} == {"ru"}
    said = " ".join(s.text for s in out.segments).lower()
    assert any(w in said for w in KEY_WORDS["ru"]), said


@pytest.mark.slow
@needs_espeak
def test_a_library_that_names_its_languages_has_french_heard_as_french(transcriber, tmp_path):
    """Base names this espeak-ng French Latin (Hungarian its likeliest); among the languages a
    library says it speaks, French is the likeliest, and the talk is transcribed in it."""
    talk = write_talk(tmp_path / "fr.webm", 12.0, [(0.5, MUSEUM)], fps=2, language="fr").path
    assert transcriber.transcribe_file(talk).language != "fr"
    cfg = transcriber.cfg
    transcriber.cfg = cfg.model_copy(update={"speech_languages": ("en", "fr", "es", "de")})
    try:
        out = transcriber.transcribe_file(talk)
    finally:
        transcriber.cfg = cfg
    assert out.language == "fr" and {s.language for s in out.segments} == {"fr"}
    assert "des" in " ".join(s.text for s in out.segments).lower().split()  # French words


MUSEUM = "Le musée des beaux-arts présente une nouvelle exposition de peintures impressionnistes."


@pytest.mark.slow
@needs_espeak
def test_english_is_not_translated(transcriber, tmp_path):
    out = transcriber.transcribe_file(
        write_talk(tmp_path / "en.mp4", 7.0, [(0.5, SENTENCES["en"][1])], fps=2).path
    )
    assert out.language == "en"
    assert "station" in " ".join(s.text for s in out.segments).lower()
    assert all(s.english is None for s in out.segments)


@pytest.mark.slow
@needs_espeak
def test_english_is_heard_without_asking_the_language_and_spanish_is_asked(
    transcriber, tmp_path, monkeypatch
):
    """English is kept from tiny.en where it is sure of every word, without running the
    multilingual model's language detection (as much CPU again); Spanish, which tiny.en
    cannot hear surely, is still detected and transcribed in Spanish."""
    asked = []
    detect = transcriber.model.detect_language

    def counted(*a, **kw):
        asked.append(1)
        return detect(*a, **kw)

    monkeypatch.setattr(transcriber.model, "detect_language", counted)
    out = transcriber.transcribe_file(
        write_talk(tmp_path / "en.mp4", 7.0, [(0.5, SENTENCES["en"][1])], fps=2).path
    )
    assert out.language == "en" and "station" in " ".join(s.text for s in out.segments).lower()
    assert asked == []
    out = transcriber.transcribe_file(_talk(tmp_path, "es").path)
    assert out.language == "es" and asked


# Clear, long sentences: a language decision hears ~30 s of speech (speech.CHUNK_S), and a
# later chunk switches only where the model is sure (SWITCH_CONFIDENCE).
MORE = {
    "en": (
        "Every morning the bakery on the corner sells fresh bread and coffee to the people going to work.",
        "In the afternoon the children play football in the park behind the old library.",
        "The museum opens at ten o'clock in the morning and closes at six in the evening.",
        "Last summer we travelled by bus along the coast and stayed in a small hotel near the beach.",
    ),
    "es": (
        "Cada mañana la panadería de la esquina vende pan fresco y café a la gente que va al trabajo.",
        "Por la tarde los niños juegan al fútbol en el parque detrás de la biblioteca antigua.",
    ),
}


@pytest.mark.slow
@needs_espeak
def test_a_talk_that_switches_from_english_to_spanish_carries_both(transcriber, tmp_path):
    """~35 s of English (one language decision's worth), a pause, then ~20 s of Spanish: the
    Spanish part is transcribed in Spanish and rendered in English, the English part not."""
    said, t = [], 0.5
    for lang, gap in (("en", 3.0), ("es", 0.0)):
        for text in (*SENTENCES[lang], *MORE[lang]):
            said.append((t, text, lang))
            t += len(speak(text, voice_of(lang))) / AUDIO_RATE + 1.2
        t += gap
    talk = write_talk(tmp_path / "switch.mkv", round(t + 1.0), said, fps=1)
    out = transcriber.transcribe_file(talk.path)
    assert out.language == "en"  # the video's: the one it starts in
    languages = [s.language for s in out.segments]
    assert set(languages) == {"en", "es"}
    switch = languages.index("es")
    assert languages == ["en"] * switch + ["es"] * (len(languages) - switch), languages
    english = [s for s in out.segments if s.language == "en"]
    spanish = [s for s in out.segments if s.language == "es"]
    assert "station" in " ".join(s.text for s in english).lower()
    assert all(s.english is None for s in english)
    heard = " ".join(s.text for s in spanish).lower()
    assert any(w in heard for w in KEY_WORDS["es"]), heard
    assert all(s.english for s in spanish)  # rendered in English beside the original
    first_spanish = said[len(SENTENCES["en"]) + len(MORE["en"])][0]
    assert english[-1].end_s <= first_spanish + 0.5 <= spanish[0].start_s + 1.5  # where it switched
