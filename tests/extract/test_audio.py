"""Audio decoding on real files with espeak-ng speech, silence, music, no track, broken tracks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vifusion.extract.audio import SAMPLE_RATE, AudioReader, read_audio
from vifusion.samples import talks as _talks

needs_espeak = pytest.mark.skipif(
    not _talks.have_espeak(),
    reason="espeak-ng is not installed (Debian: apt-get install espeak-ng)",
)
PHRASE = "The quarterly meeting starts at nine."


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("audio")


def _onset_s(start_s: float, pcm: np.ndarray) -> float:
    """Time of the first clearly audible sample."""
    return start_s + np.flatnonzero(np.abs(pcm) > 0.05)[0] / SAMPLE_RATE


@needs_espeak
@pytest.mark.parametrize("suffix", [".mp4", ".mkv", ".webm"])
def test_speech_is_decoded_to_16k_mono_at_its_time(media: Path, suffix: str) -> None:
    talk = _talks.write_talk(media / f"speech{suffix}", 6.0, said=[(2.0, PHRASE)])
    start_s, pcm, report = read_audio(talk.path, max_duration_s=3600)
    assert (report.status, report.reason, report.truncated) == ("ok", None, False)
    assert pcm.dtype == np.float32 and pcm.ndim == 1
    assert start_s == pytest.approx(0.0, abs=0.03)  # AAC's encoder delay is a few ms
    assert (
        report.duration_s
        == pytest.approx(6.0, abs=0.05)
        == pytest.approx(len(pcm) / SAMPLE_RATE, abs=0.03)
    )
    # Nothing audible before the phrase; the phrase where it was put.
    assert 2.0 <= _onset_s(start_s, pcm) < 2.0 + 0.4


@needs_espeak
@pytest.mark.parametrize("suffix", [".mp4", ".mkv"])
def test_audio_that_starts_after_the_video_keeps_its_time(media: Path, suffix: str) -> None:
    talk = _talks.write_talk(media / f"late{suffix}", 6.0, said=[(0.5, PHRASE)], audio_start_s=2.0)
    start_s, pcm, report = read_audio(talk.path, max_duration_s=3600)
    assert report.status == "ok"
    assert start_s == pytest.approx(2.0, abs=0.03)
    assert 2.5 <= _onset_s(start_s, pcm) + 0.03 < 2.5 + 0.4


@pytest.mark.parametrize("suffix", [".mp4", ".webm"])
def test_no_audio_track(media: Path, suffix: str) -> None:
    talk = _talks.write_talk(media / f"mute{suffix}", 2.0, audio="none")
    reader = AudioReader(talk.path, max_duration_s=3600)
    assert list(reader.windows()) == []
    assert reader.report.status == "no_audio"
    assert reader.report.reason == f"mute{suffix}: no audio track"


def test_silence(media: Path) -> None:
    talk = _talks.write_talk(media / "silence.mkv", 3.0, audio="silence")
    _, pcm, report = read_audio(talk.path, max_duration_s=3600)
    assert report.status == "silent" and report.reason == "silence.mkv: audio track is silent"
    assert report.duration_s == pytest.approx(3.0, abs=0.05)


def test_music_is_audio_not_silence(media: Path) -> None:
    talk = _talks.write_talk(media / "music.mp4", 3.0, audio="music")
    _, pcm, report = read_audio(talk.path, max_duration_s=3600)
    assert (report.status, report.reason) == ("ok", None)
    assert np.abs(pcm).max() > 0.1


@pytest.mark.parametrize("suffix", [".mp4", ".mkv"])
def test_broken_audio_stream_is_reported_not_raised(media: Path, suffix: str) -> None:
    talk = _talks.write_talk(media / f"broken{suffix}", 4.0, audio="broken")
    _, pcm, report = read_audio(talk.path, max_duration_s=3600)
    assert report.status == "broken" and len(pcm) == 0
    assert report.reason.startswith(f"broken{suffix}: broken audio stream (")
    assert "packets undecodable" in report.reason


@pytest.mark.parametrize("content", [b"", b"this is a text file, not a video\n"])
def test_not_a_media_file(media: Path, content: bytes) -> None:
    path = media / "notes.mp4"
    path.write_bytes(content)
    _, pcm, report = read_audio(path, max_duration_s=3600)
    assert report.status == "broken" and report.reason.startswith(
        "notes.mp4: cannot open for audio: "
    )
    assert len(pcm) == 0


def test_missing_file(media: Path) -> None:
    report = read_audio(media / "gone.mp4", max_duration_s=3600)[2]
    assert report.status == "broken" and "No such file" in report.reason


def test_max_duration_caps_the_audio(media: Path) -> None:
    talk = _talks.write_talk(media / "long.mkv", 5.0, audio="music")
    _, pcm, report = read_audio(talk.path, max_duration_s=2.0)
    assert len(pcm) == 2 * SAMPLE_RATE and report.duration_s == 2.0
    assert report.status == "ok" and report.truncated
    assert report.reason == "long.mkv: audio past 2 s left out (audio_max_s)"


@needs_espeak
def test_windows_cover_the_track_and_end_in_quiet_moments(media: Path) -> None:
    talk = _talks.write_talk(
        media / "windows.mp4", 12.0, said=[(0.5, PHRASE), (4.0, PHRASE), (8.0, PHRASE)]
    )
    whole = read_audio(talk.path, max_duration_s=3600)[1]
    windows = list(AudioReader(talk.path, max_duration_s=3600, window_s=3.0).windows())
    assert len(windows) >= 4
    assert np.array_equal(np.concatenate([w for _, w in windows]), whole)
    for (start, pcm), (nxt, _) in zip(windows, windows[1:]):
        assert len(pcm) <= 3 * SAMPLE_RATE
        assert nxt == pytest.approx(start + len(pcm) / SAMPLE_RATE)
        # Each window ends in a quiet moment, not through a word.
        tail = pcm[-SAMPLE_RATE // 20 :]
        assert np.sqrt(np.mean(tail**2)) <= np.sqrt(np.mean(whole**2))
