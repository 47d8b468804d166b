"""`vifusion demo`: beside what is seen, it searches what a talk says and shows."""

import pytest

from vifusion.cli.demo import TALK, talk_queries
from vifusion.config import Config
from vifusion.samples.talks import have_espeak

needs_espeak = pytest.mark.skipif(not have_espeak(), reason="espeak-ng is not installed")


@needs_espeak
def test_the_talk_gives_a_spoken_and_an_on_screen_query_each_at_its_own_moment(tmp_path):
    said, shown = talk_queries(tmp_path)
    assert (tmp_path / TALK).stat().st_size > 0
    assert said.label.startswith("said: ") and shown.label.startswith("on screen: ")
    assert {said.kind, shown.kind} == {"text"} and {said.video, shown.video} == {TALK}
    # the phrase is over before the slide comes up: each query has one right moment
    assert 0 < said.start_s < said.end_s <= shown.start_s < shown.end_s


@pytest.mark.slow
@needs_espeak
def test_the_demo_table_finds_what_is_seen_said_and_shown(tmp_path, capsys):
    from vifusion.cli.demo import run_demo

    assert run_demo(Config(data_dir=tmp_path / "data")) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.split()[-1:] != []]
    table = {
        ln.split("  ")[0]: ln
        for ln in rows
        if ln.startswith(("text:", "image:", "clip:", "said:", "on screen:"))
    }
    assert any(k.startswith("said:") for k in table) and any(
        k.startswith("on screen:") for k in table
    )
    assert any(k.startswith("text:") for k in table) and any(k.startswith("clip:") for k in table)
    assert all(" yes " in ln for ln in table.values()), table
    assert f"{len(table)}/{len(table)} queries found the right moment" in "\n".join(rows)
