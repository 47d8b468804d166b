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
