"""`vifusion search --in ...` and `vifusion transcript`: a data dir holding what one video
says and shows (catalog rows and their vectors in the shards, as ingest stores them), read
by the CLI as a user runs it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import ray
import torch

from tests._helpers import run_cli
from vifusion.config import Config
from vifusion.extract.text import TextEncoder
from vifusion.query.ranking import bracketed
from vifusion.runtime import Runtime
from vifusion.types import FusedBatch

SAID = [
    (0.0, 4.0, "Welcome to the quarterly review of the Lisbon office."),
    (4.0, 9.0, "Next we discuss the migration of the billing service."),
]
SHOWN = [(2.0, 8.0, "Hiring plan: 3 engineers <Porto> & Lisbon")]


@pytest.fixture(scope="module")
def data(ray_session, tmp_path_factory):
    data = tmp_path_factory.mktemp("cli-words")
    encoder = TextEncoder(torch.device("cpu"))
    with Runtime(Config(data_dir=data), writer=True) as rt:
        video, job = rt.catalog.add_video("/v/talk.mp4", "talk")
        batches = []
        for kind, rows in (("speech", SAID), ("screen", SHOWN)):
            rt.catalog.put_texts(video, kind, rows)
            spans = np.array([[a, b] for a, b, _ in rows])
            batches.append(
                FusedBatch.of_texts(video, kind, 0, spans, encoder.encode([t for _, _, t in rows]))
            )
        ray.get([rt.shards.handle_for(video).add.remote(b) for b in batches])
        rt.catalog.update_job(job, "ready")
    return data


def test_search_prints_what_matched_and_the_words(data, capsys):
    code, out, _ = run_cli(
        capsys, "search", "--data-dir", str(data), "--in", "speech,screen", "billing migration"
    )
    assert code == 0, out
    head, first, words = out.splitlines()[:3]
    assert "matched" in head and "0:04.0-0:09.0" in first and "speech" in first
    assert words.strip() == "Next we discuss the [migration] of the [billing] service."
    code, out, _ = run_cli(
        capsys, "search", "--data-dir", str(data), "--json", "--in", "screen", "Porto engineers"
    )
    top = json.loads(out.splitlines()[0])
    assert (top["start_s"], top["end_s"], top["matched"]) == (2.0, 8.0, ["screen"])
    assert (
        bracketed(top["snippet"], top["highlights"])
        == "Hiring plan: 3 [engineers] <[Porto]> & Lisbon"
    )


def test_search_in_screen_does_not_find_what_was_only_said(data, capsys):
    code, out, _ = run_cli(
        capsys, "search", "--data-dir", str(data), "--json", "--in", "screen", "billing migration"
    )
    assert code == 0
    assert all(json.loads(line)["matched"] == ["screen"] for line in out.splitlines())


@pytest.mark.parametrize("modalities", ["smell", "", "speech,,smell"])
def test_unknown_modalities_are_a_usage_error(data, capsys, modalities):
    code, _, err = run_cli(capsys, "search", "--data-dir", str(data), "--in", modalities, "billing")
    assert code == 2 and "--in" in err


def test_transcript_as_text_and_as_webvtt(data, capsys):
    code, out, _ = run_cli(capsys, "transcript", "--data-dir", str(data), "1")
    assert code == 0
    assert [line.split(None, 2) for line in out.splitlines()] == [
        ["0:00.0-0:04.0", "speech", SAID[0][2]],
        ["0:04.0-0:09.0", "speech", SAID[1][2]],
    ]
    code, out, _ = run_cli(
        capsys, "transcript", "--data-dir", str(data), "1", "--kind", "all", "--vtt"
    )
    assert code == 0
    assert out == (
        "WEBVTT\n\nspeech-0\n00:00:00.000 --> 00:00:04.000\n" + SAID[0][2] + "\n\n"
        "screen-0\n00:00:02.000 --> 00:00:08.000\nHiring plan: 3 engineers &lt;Porto&gt; &amp; Lisbon\n\n"
        "speech-1\n00:00:04.000 --> 00:00:09.000\n" + SAID[1][2] + "\n"
    )


def test_transcript_of_an_unknown_video_or_data_dir(data, capsys, tmp_path):
    code, _, err = run_cli(capsys, "transcript", "--data-dir", str(data), "7")
    assert code == 1 and "no video 7" in err
    code, _, err = run_cli(capsys, "transcript", "--data-dir", str(tmp_path / "nowhere"), "1")
    assert code == 2 and "no catalog" in err
