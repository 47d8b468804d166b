"""`vifusion index` and `vifusion search` end to end: real videos written with PyAV, real
models, real Ray actors, real FAISS, real SQLite. The indexing run (conftest `indexed`) is
shared by the session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests._helpers import cli_process
from vifusion.cli import parser as cli
from vifusion.cli.demo import distorted_frame
from vifusion.samples import write_clip


def search(data: Path, *args: str, capsys) -> list[dict]:
    capsys.readouterr()
    code = cli.main(["search", "--data-dir", str(data), "--json", "--top-k", "3", *args])
    out = capsys.readouterr().out
    assert code == 0, out
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def covers(row: dict, start: float, end: float) -> bool:
    return row["start_s"] < end and start < row["end_s"]


def test_bad_inputs_are_named_with_reasons_and_good_videos_still_indexed(indexed):
    _, _, (code, out, err) = indexed
    assert code == 1
    assert "indexed 3 video(s)" in out
    assert "failed 5" in out
    for name, why in [
        ("notes.mp4", "not a video"),
        ("empty.mp4", "empty"),
        ("truncated.mp4", ""),
        ("missing.mp4", "no such file"),
        ("nothing-here", "no video files"),
    ]:
        line = next((ln for ln in err.splitlines() if name in ln), None)
        assert line is not None, f"{name} not reported:\n{err}"
        assert why in line, line


def test_videos_without_audio_are_indexed_and_say_so(indexed):
    _, videos, (_, _, err) = indexed
    for name in videos:  # the demo videos have no audio track
        assert f"  warning: {name}: no audio track" in err.splitlines(), err


def test_text_query_finds_the_cat_scene(indexed, capsys):
    data, videos, _ = indexed
    top = search(data, "a cat", capsys=capsys)[0]
    cat = videos["kitchen.mp4"].scene_of("chelsea")
    assert Path(top["source"]).name == "kitchen.mp4"
    assert top["start_s"] <= cat.start_s + 1 and top["end_s"] >= cat.end_s - 1, top


def test_image_query_finds_the_frame_within_a_second(indexed, capsys, tmp_path):
    data, videos, _ = indexed
    launch = videos["launch.mp4"]
    astro = launch.scene_of("astronaut")
    t = (astro.start_s + astro.end_s) / 2
    img = tmp_path / "query.png"
    Image.fromarray(distorted_frame(launch, t)).save(img)
    top = search(data, "--image", str(img), capsys=capsys)[0]
    assert Path(top["source"]).name == "launch.mp4"
    assert top["start_s"] - 1 <= t <= top["end_s"] + 1, top


def test_clip_query_finds_where_the_clip_was_cut_from(indexed, capsys, tmp_path):
    data, videos, _ = indexed
    street = videos["street.mp4"]
    start = street.scene_of("camera").start_s + 0.5
    clip = write_clip(street.path, tmp_path / "clip.mp4", start, start + 3.0, (176, 144))
    top = search(data, "--clip", str(clip), capsys=capsys)[0]
    assert Path(top["source"]).name == "street.mp4"
    assert covers(top, start, start + 3.0), top


def test_a_new_process_on_the_same_data_dir_gives_the_same_results(indexed, capsys):
    """Restart: a fresh `vifusion` process (its own Ray, shards loaded from disk)."""
    data, _, _ = indexed
    here = search(data, "a rocket", capsys=capsys)
    proc = cli_process("search", "--data-dir", str(data), "--json", "--top-k", "3", "a rocket")
    assert proc.returncode == 0, proc.stderr
    there = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert [(r["video_id"], r["start_s"], r["end_s"]) for r in there] == [
        (r["video_id"], r["start_s"], r["end_s"]) for r in here
    ]
    assert np.allclose([r["score"] for r in there], [r["score"] for r in here], atol=1e-3)


def test_indexing_the_same_files_again_skips_them(indexed, capfd):
    data, videos, _ = indexed
    code = cli.main(
        ["index", "--quiet", "--data-dir", str(data), *[str(v.path) for v in videos.values()]]
    )
    out, _ = capfd.readouterr()
    assert code == 0
    assert "indexed 0 video(s)" in out and "skipped 3" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "--data-dir", "x"],
        ["search", "a cat", "--image", "y.png"],
        ["index"],
        ["search", "a", "--top-k", "0"],
    ],
)
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        sys.exit(cli.main(argv))
    assert e.value.code == 2


def test_a_data_dir_built_with_other_settings_is_refused_clearly(indexed, capsys, monkeypatch):
    data, _, _ = indexed
    monkeypatch.setenv("VIFUSION_NUM_SHARDS", "3")
    assert cli.main(["search", "--data-dir", str(data), "a cat"]) == 2
    assert "built with 2 shards" in capsys.readouterr().err


def test_a_list_file_names_videos_relative_to_itself(tmp_path):
    from vifusion.ingest.inputs import expand_paths

    (tmp_path / "clips").mkdir()
    for name in ("a.mp4", "b.mp4"):
        (tmp_path / "clips" / name).write_bytes(b"x")
    (tmp_path / "more.txt").write_text("")
    listing = tmp_path / "batch.list"
    listing.write_text(
        "# tonight's batch\nclips/a.mp4\n\n  clips/b.mp4  \nclips/gone.mp4\nmore.txt\n"
    )
    files, failed = expand_paths([listing])
    assert files == [tmp_path / "clips" / "a.mp4", tmp_path / "clips" / "b.mp4"]
    reasons = {Path(r.path).name: r.error for r in failed}
    assert "no such file" in reasons["gone.mp4"] and "list inside a list" in reasons["more.txt"]


def test_a_batch_run_again_from_a_list_file_resumes(indexed, capfd, tmp_path):
    data, videos, _ = indexed
    listing = tmp_path / "videos.txt"
    listing.write_text("".join(f"{v.path}\n" for v in videos.values()))
    code = cli.main(["index", "--quiet", "--data-dir", str(data), str(listing)])
    out, _ = capfd.readouterr()
    assert code == 0
    assert "indexed 0 video(s)" in out and f"skipped {len(videos)}" in out


def test_a_data_dir_that_cannot_be_written_is_a_clear_error_and_stays_as_it_was(tmp_path, capsys):
    import shutil
    import stat

    from vifusion.catalog import open_catalog
    from vifusion.config import Config

    data = tmp_path / "data"
    data.mkdir()
    catalog = open_catalog(Config(data_dir=data))
    catalog.add_video("/videos/a.mp4", "a")
    catalog.close()
    before = {p.name: p.read_bytes() for p in data.iterdir()}
    (tmp_path / "a.mp4").write_bytes(b"not looked at: the data dir is refused first")
    # Read-only: root ignores permission bits, so as root the directory is made immutable.
    as_root = os.geteuid() == 0 and shutil.which("chattr")
    if as_root:
        subprocess.run(["chattr", "+i", str(data)], check=True)
    else:
        data.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        code = cli.main(["index", "--quiet", "--data-dir", str(data), str(tmp_path / "a.mp4")])
        err = capsys.readouterr().err
        serve_code = cli.main(["serve", "--data-dir", str(data)])
        serve_err = capsys.readouterr().err
    finally:
        if as_root:
            subprocess.run(["chattr", "-i", str(data)], check=True)
        else:
            data.chmod(stat.S_IRWXU)
    assert code == serve_code == 2
    for said in (err, serve_err):
        assert f"the data dir {data} cannot be written" in said and "Traceback" not in said
    assert {p.name: p.read_bytes() for p in data.iterdir()} == before
