"""Speech to text with the real tiny.en model on espeak-ng speech (no mocks, no network)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests._helpers import needs_espeak, words
from vifusion.config import Config
from vifusion.extract.audio import SAMPLE_RATE, read_audio
from vifusion.extract.speech import Segment, Transcriber
from vifusion.samples import talks as _talks

MEETING = "The quarterly meeting starts at nine."
HARBOUR = "Please meet me at the old harbour tomorrow morning."
ZORBLAX = "Our new product is called Zorblax and it ships in March."


@pytest.fixture(scope="module")
def transcriber() -> Transcriber:
    return Transcriber(Config(speech_threads=1))


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("speech")


def _content(text: str) -> set[str]:
    return words(text) - {"the", "at", "a", "me", "is", "it", "and", "our", "in"}


def _heard(segments: tuple[Segment, ...] | list[Segment], start_s: float, end_s: float) -> str:
    """The text of the segments overlapping [start_s, end_s)."""
    return " ".join(s.text for s in segments if s.start_s < end_s and s.end_s > start_s)


@needs_espeak
def test_spoken_phrases_are_transcribed_at_their_times(
    transcriber: Transcriber, media: Path
) -> None:
    talk = _talks.write_talk(media / "talk.mp4", 14.0, said=[(1.0, MEETING), (7.0, HARBOUR)])
    transcript = transcriber.transcribe_file(talk.path)
    assert transcript.reason is None and transcript.audio.status == "ok"
    for said in talk.said:
        heard = _heard(transcript.segments, said.start_s, said.end_s)
        # tiny.en makes mistakes ("nine" as "9", "time"): most content words must be there.
        want = _content(said.text)
        assert len(want & words(heard)) >= 0.6 * len(want), (said.text, heard)
    # Each segment lies about where its words were said (Whisper's times are coarse).
    for seg in transcript.segments:
        said = next(
            s for s in talk.said if s.start_s - 1.0 <= seg.start_s and seg.end_s <= s.end_s + 1.0
        )
        assert said is not None
        assert seg.avg_logprob <= 0 and 0 <= seg.no_speech_prob <= 1
        assert all(
            type(v) is float for v in (seg.start_s, seg.end_s, seg.avg_logprob, seg.no_speech_prob)
        )


@needs_espeak
@pytest.mark.parametrize("suffix", [".mkv", ".webm"])
def test_opus_audio_is_transcribed(transcriber: Transcriber, media: Path, suffix: str) -> None:
    talk = _talks.write_talk(media / f"talk{suffix}", 6.0, said=[(1.0, HARBOUR)])
    transcript = transcriber.transcribe_file(talk.path)
    heard = _heard(transcript.segments, 0, 6.0)
    assert {"old", "tomorrow", "morning"} <= words(heard), heard


@needs_espeak
def test_a_made_up_word(transcriber: Transcriber, media: Path) -> None:
    """ "Zorblax", spoken once. tiny.en knows no such word and writes what it heard as English
    ("Zordax", "Lord Max", "Norablax", "Laura Blacks" with other voices and contexts): a search
    for the exact word will not find it in this transcript. What must hold is that the
    sentence around it is transcribed where it was said."""
    talk = _talks.write_talk(media / "zorblax.mp4", 6.0, said=[(1.0, ZORBLAX)], voice="en")
    transcript = transcriber.transcribe_file(talk.path)
    heard = _heard(transcript.segments, talk.said[0].start_s, talk.said[0].end_s)
    assert {"product", "called", "ships", "march"} <= words(heard), heard
    print(f"tiny.en wrote {heard!r} for {ZORBLAX!r}")


@pytest.mark.parametrize("audio", ["none", "silence", "music", "broken"])
def test_no_speech_gives_no_segments_and_a_reason(
    transcriber: Transcriber, media: Path, audio: str
) -> None:
    talk = _talks.write_talk(media / f"{audio}.mp4", 5.0, audio=audio)
    transcript = transcriber.transcribe_file(talk.path)
    assert transcript.segments == ()
    expected = {
        "none": "no audio track",
        "silence": "audio track is silent",
        "music": "no speech heard in 5.0 s of audio",
        "broken": "broken audio stream (",
    }[audio]
    assert transcript.reason.startswith(f"{audio}.mp4: {expected}")


def test_noise_gives_no_segments(transcriber: Transcriber) -> None:
    noise = np.random.default_rng(0).normal(0, 0.1, 5 * SAMPLE_RATE).astype(np.float32)
    assert transcriber.transcribe(noise) == []
    assert transcriber.transcribe(np.zeros(SAMPLE_RATE, np.float32)) == []


@needs_espeak
def test_offset_shifts_segment_times(transcriber: Transcriber, media: Path) -> None:
    talk = _talks.write_talk(media / "offset.mkv", 5.0, said=[(1.0, MEETING)])
    start_s, pcm, _ = read_audio(talk.path, max_duration_s=3600)
    plain = transcriber.transcribe(pcm, offset_s=start_s)
    shifted = transcriber.transcribe(pcm, offset_s=start_s + 100.0)
    assert plain and [s.text for s in plain] == [s.text for s in shifted]
    assert [s.start_s + 100.0 for s in plain] == pytest.approx([s.start_s for s in shifted])


@needs_espeak
def test_audio_max_s_leaves_out_the_rest(media: Path) -> None:
    talk = _talks.write_talk(media / "capped.mp4", 10.0, said=[(0.5, MEETING), (6.0, HARBOUR)])
    transcript = Transcriber(Config(speech_threads=1, audio_max_s=5.0)).transcribe_file(talk.path)
    assert transcript.segments and all(s.end_s <= 5.0 for s in transcript.segments)
    assert "tomorrow" not in words(" ".join(s.text for s in transcript.segments))
    assert transcript.reason == "capped.mp4: audio past 5 s left out (audio_max_s)"


def test_a_model_dir_that_is_not_a_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a CTranslate2 Whisper model directory"):
        Transcriber(Config(speech_model_dir=tmp_path))


@needs_espeak
def test_loads_and_transcribes_with_the_network_cut_off(media: Path) -> None:
    """In a fresh process where every socket connect fails and the hub is set offline."""
    talk = _talks.write_talk(media / "offline.mp4", 5.0, said=[(0.5, MEETING)])
    script = (
        "import socket, json, sys\n"
        "def refuse(*a, **k): raise OSError('network use in an offline test')\n"
        "socket.socket.connect = socket.socket.connect_ex = refuse\n"
        "socket.create_connection = refuse\n"
        "from vifusion.config import Config\n"
        "from vifusion.extract.speech import Transcriber\n"
        "t = Transcriber(Config(speech_threads=1)).transcribe_file(sys.argv[1])\n"
        "print(json.dumps([s.text for s in t.segments]))\n"
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
    }
    out = subprocess.run(
        [sys.executable, "-c", script, str(talk.path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "quarterly" in " ".join(json.loads(out.stdout.splitlines()[-1])).lower()


def test_tokens_decoded_are_bounded_by_the_voice_in_a_run() -> None:
    """A loop ends at about twice what fast speech says: the bound counts only the voice inside
    the run, and stops growing at what one window of Whisper hears."""
    from vifusion.extract._decoding import TOKENS_PER_S, WINDOW_S, token_limit, voiced_s

    voiced = [
        {"start": 0, "end": 2 * SAMPLE_RATE},
        {"start": 5 * SAMPLE_RATE, "end": 9 * SAMPLE_RATE},
    ]
    assert voiced_s(voiced, SAMPLE_RATE, 6 * SAMPLE_RATE) == 2.0
    assert token_limit(2.0) - token_limit(0.0) == 2 * TOKENS_PER_S
    assert token_limit(10 * WINDOW_S) == token_limit(WINDOW_S)


class _Heard:
    """A faster-whisper segment as ``Transcriber`` reads it."""

    def __init__(self, start: float, text: str, compression_ratio: float = 1.5) -> None:
        self.start, self.end, self.text = start, start + 2.0, text
        self.compression_ratio, self.avg_logprob, self.no_speech_prob = compression_ratio, -0.4, 0.0
        self.words = None


class _Whisper:
    """Stands in for faster-whisper's model: greedy decoding of ``looping`` tasks loops in its
    second segment (3-5 s), or in every one (``only_loops``), as base's greedy decoding does
    on some speech; beam search does not. ``pulled``: the segments each call's decoding
    reached."""

    def __init__(self, looping: set[str] = frozenset(), logprob: float = -0.4) -> None:
        self.looping, self.logprob, self.only_loops = looping, logprob, False
        self.calls, self.pulled = [], []

    def transcribe(self, samples, *, task: str, beam_size: int, **_):
        self.calls.append((task, beam_size))
        loops = beam_size == 1 and task in self.looping
        loop = "the one who will be the one who will be"
        heard = [_Heard(0.0, "hola"), _Heard(3.0, loop if loops else f"{task} {beam_size}")]
        heard += [_Heard(6.0 + 3 * i, f"more {i}") for i in range(3)]
        for h in heard:
            h.avg_logprob = self.logprob
            if loops and (self.only_loops or h.text == loop):
                h.text, h.compression_ratio = loop, 7.0
        self.pulled.append(0)
        return self._decoded(heard), None

    def _decoded(self, heard):
        for h in heard:
            self.pulled[-1] += 1
            yield h


_LONG = 16 * SAMPLE_RATE  # a window of the stand-in's five segments


def _transcriber_on(model: _Whisper, language: str | None) -> Transcriber:
    tr = object.__new__(Transcriber)
    tr.cfg = Config(speech_language=language, speech_model_dir=Path("/nonexistent"))
    tr.model, tr._english = model, None
    return tr


def test_a_rendering_that_loops_keeps_what_greedy_decoding_heard_around_the_loop() -> None:
    """The English rendering (for the meaning search) is decoded again with beam search only
    where greedy decoding kept nothing: a loop loses its own segment's rendering, no other."""
    model = _Whisper({"translate"})
    out = _transcriber_on(model, "es").transcribe(np.full(_LONG, 0.1, np.float32))
    assert model.calls == [("transcribe", 5), ("translate", 1)]
    assert [s.text for s in out] == ["hola", "transcribe 5", "more 0", "more 1", "more 2"]
    assert out[0].english == "hola" and out[1].english is None and out[2].english == "more 0"


def test_a_rendering_that_loops_throughout_is_decoded_again_with_beam_search() -> None:
    model = _Whisper({"translate"})
    model.only_loops = True
    out = _transcriber_on(model, "es").transcribe(np.full(_LONG, 0.1, np.float32))
    assert model.calls == [("transcribe", 5), ("translate", 1), ("translate", 5)]
    assert out[1].english == "translate 5"


def test_english_first_stops_decoding_at_the_first_piece_it_is_unsure_of() -> None:
    """tiny.en hears a window first; where its first 30 s are not surely English, the rest of
    the window (up to 5 minutes) is not decoded by it: the multilingual model takes over."""
    tiny, base = _Whisper(logprob=-1.2), _Whisper()
    tr = _transcriber_on(base, None)
    tr.cfg = Config(speech_english_tiny=True)
    tr._english = tiny
    assert tr._surely_english(np.full(_LONG, 0.1, np.float32), [], None) is None
    assert tiny.pulled == [1]
    tiny.logprob = -0.4  # sure of every piece: all of them heard, and kept as English
    heard = tr._surely_english(np.full(_LONG, 0.1, np.float32), [], None)
    assert tiny.pulled == [1, 5] and [text for _, _, text, _ in heard][:2] == [
        "hola",
        "transcribe 5",
    ]


class _Named:
    """Stands in for Whisper's language detection: espeak's French as base hears it."""

    def detect_language(self, audio):
        ranked = [("hu", 0.37), ("nn", 0.14), ("la", 0.12), ("fr", 0.10), ("en", 0.05)]
        return ranked[0][0], ranked[0][1], ranked


def test_a_language_is_named_among_the_librarys_alone() -> None:
    from vifusion.extract._language import named

    assert named(_Named(), np.zeros(10, np.float32))[:2] == ("hu", 0.37)
    found, p, ranked = named(_Named(), np.zeros(10, np.float32), ("fr", "en", "es"))
    assert (found, round(p, 3)) == ("fr", 0.667)
    assert [lang for lang, _ in ranked] == ["fr", "en"]


def test_the_librarys_languages_from_the_environment_and_checked() -> None:
    cfg = Config.load(env={"VIFUSION_SPEECH_LANGUAGES": "es, FR,en"})
    assert cfg.speech_languages == ("es", "fr", "en")
    with pytest.raises(ValueError, match="xx not among Whisper's languages"):
        Config(speech_languages=("es", "xx"))
