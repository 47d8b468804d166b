"""Titles and stored file names: a title is what the client said; only the name of the file
stored under the data dir is made safe and short enough for the file system."""

from __future__ import annotations

import os

import pytest

from vifusion.config import Config
from vifusion.ingest._checks import title_from_name
from vifusion.ingest.sources import MAX_TITLE_CHARS, new_media_path


@pytest.mark.parametrize(
    ("name", "title"),
    [
        ("Dr. Who.mp4", "Dr. Who"),
        ("Dr. Who", "Dr. Who"),  # ". Who" is no extension
        ("AC-DC live.MOV", "AC-DC live"),
        ("/home/me/clips/holiday.mkv", "holiday"),
        ("C:\\Users\\me\\holiday.webm", "holiday"),
        ("archive.tar.gz", "archive.tar"),
        (".mp4", ".mp4"),
        ("   ", "fallback"),
        (None, "fallback"),
    ],
)
def test_a_title_from_a_file_name_drops_the_folder_and_a_plain_extension(name, title):
    assert title_from_name(name, "fallback") == title


def test_a_title_from_a_long_file_name_is_cut_to_the_cap():
    assert title_from_name("x" * 500 + ".mp4", "f") == "x" * MAX_TITLE_CHARS


@pytest.mark.parametrize(
    "name", ["視頻" * 50 + ".mp4", "𝒱" * 100 + ".webm", "a" * 300 + ".mp4", "é" * 254 + ".mkv"]
)
def test_a_stored_file_name_fits_the_file_system_and_keeps_its_extension(tmp_path, name):
    path = new_media_path(Config(data_dir=tmp_path), name)
    assert len(path.name.encode()) <= 255
    assert path.suffix == os.path.splitext(name)[1]
    assert name.startswith(path.stem)  # the start of the name, cut on a character boundary
    path.write_bytes(b"x")  # the file system takes it
