"""Calibration: decoding's cost by bitrate and sampling; speech with the real speech model on a
real spoken talk."""

import logging

import pytest

from vifusion.config import Config
from vifusion.plan.calibrate import _Decoding, _key, decode_cs_at, speech_cs
from vifusion.samples.talks import have_espeak


@pytest.mark.skipif(not have_espeak(), reason="espeak-ng (Debian package) not installed")
def test_speech_costs_cpu_for_each_second_of_speech(tmp_path):
    cost = speech_cs(Config(data_dir=tmp_path, speech_threads=1), tmp_path)
    # Whisper tiny.en on one thread: well under a core-second a second of speech, not free.
    assert 0.005 < cost < 1.0


def test_without_espeak_speech_is_not_calibrated_and_says_so(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PATH", str(tmp_path))  # no espeak-ng on it
    with caplog.at_level(logging.WARNING, logger="vifusion.plan.calibrate"):
        assert speech_cs(Config(data_dir=tmp_path), tmp_path) == 0.0
    assert "apt-get install espeak-ng" in caplog.text


def test_costs_cached_with_speech_are_not_those_without(tmp_path):
    assert _key(Config(speech=True)) != _key(Config(speech=False))


SMALL = _Decoding(cs_per_s=0.10, bits_per_s=0.2e6)  # core-s a second of video, at its bitrate
DENSE = _Decoding(cs_per_s=0.30, bits_per_s=3.6e6)


def test_decoding_is_charged_by_seconds_of_video_whatever_is_sampled():
    # every frame is decoded: sampling 1 frame a second costs 4x a sampled frame of 4
    assert decode_cs_at(SMALL, DENSE, 0.0, 1.0) == pytest.approx(
        4 * decode_cs_at(SMALL, DENSE, 0.0, 4.0)
    )
    assert decode_cs_at(SMALL, None, 0.0, 1.0) == pytest.approx(0.10)


def test_decoding_costs_what_the_planned_bitrate_costs():
    assert decode_cs_at(SMALL, DENSE, 3.6, 1.0) == pytest.approx(0.30)  # the dense video's
    assert decode_cs_at(SMALL, DENSE, 1.9, 1.0) == pytest.approx(0.20)  # halfway
    assert decode_cs_at(SMALL, DENSE, 7.0, 1.0) == pytest.approx(0.10 + 0.2 * 6.8 / 3.4)
    assert decode_cs_at(SMALL, DENSE, 0.1, 1.0) == pytest.approx(0.10)  # no less than the small


def test_costs_are_cached_per_planned_bitrate():
    assert _key(Config(plan_video_mbps=4.0)) != _key(Config(plan_video_mbps=8.0))
