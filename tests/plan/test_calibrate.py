"""Calibration of speech: the real speech model on a real spoken talk."""

import logging

import pytest

from vifusion._talks import have_espeak
from vifusion.config import Config
from vifusion.plan.calibrate import _key, speech_cs


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
