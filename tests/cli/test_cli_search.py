"""`vifusion search` without a service: the data dir read in the command's own process (no
Ray, and for words no torch), with the answers of the Ray path (``--address``), writing
nothing. On the session's indexed demo videos (conftest ``indexed``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests._helpers import cli_process
from vifusion.cli import parser as cli
from vifusion.cli.demo import distorted_frame
from vifusion.config import Config
from vifusion.datadir import models_dir
from vifusion.extract._text_onnx import onnx_path


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}


def run(data: Path, *args: str) -> subprocess.CompletedProcess:
    """`vifusion search` in a fresh process, as a user runs it."""
    return cli_process("search", "--data-dir", str(data), *args)


def rows(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def here(data: Path, *args: str, capsys) -> list[dict]:
    capsys.readouterr()
    code = cli.main(["search", "--data-dir", str(data), "--json", *args])
    out = capsys.readouterr().out
    assert code == 0, out
    return rows(out)


def files(root: Path) -> dict[str, tuple[str, int]]:
    return {
        str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_indexing_leaves_the_query_model_for_a_fast_first_search(indexed):
    data, _, _ = indexed
    assert onnx_path(models_dir(Config(data_dir=data))).is_file()


def test_a_text_search_loads_neither_torch_nor_ray_and_finds_the_cat(indexed):
    data, videos, _ = indexed
    probe = (
        "import json, sys; from vifusion import cli; "
        f"code = cli.main(['search', '--data-dir', {str(data)!r}, '--json', 'a cat']); "
        "print(json.dumps({'code': code, 'heavy': sorted({m.split('.')[0] for m in sys.modules} "
        "& {'torch', 'transformers', 'ray'})}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=_env(), timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    *found, last = proc.stdout.strip().splitlines()
    assert json.loads(last) == {"code": 0, "heavy": []}
    top = json.loads(found[0])
    cat = videos["kitchen.mp4"].scene_of("chelsea")
    assert (
        Path(top["source"]).name == "kitchen.mp4"
        and top["start_s"] <= cat.start_s + 1 <= top["end_s"]
    ), top


def test_a_search_writes_nothing_in_the_data_dir(indexed):
    data, _, _ = indexed
    before = files(data)
    for args in (
        ["a cup of coffee"],
        ["--in", "speech,screen", "a rocket"],
        ["--group-by", "video", "a cat"],
    ):
        proc = run(data, *args)
        assert proc.returncode == 0, proc.stderr
    assert files(data) == before


@pytest.mark.parametrize(
    "args",
    [
        ["a cat"],
        ["a rocket", "--group-by", "frame"],
        ["a motorcycle", "--group-by", "video"],
        ["a cup of coffee", "--in", "visual"],
        ["astronaut", "--in", "speech,screen"],
        ["a rocket", "--top-k", "40"],
    ],
)
def test_the_same_answers_as_through_ray(indexed, capsys, args):
    data, _, _ = indexed
    fast = here(data, *args, capsys=capsys)
    ray_path = here(data, "--address", "local", *args, capsys=capsys)
    assert [(r["video_id"], r["start_s"], r["end_s"], r["matched"]) for r in fast] == [
        (r["video_id"], r["start_s"], r["end_s"], r["matched"]) for r in ray_path
    ]
    assert np.allclose([r["score"] for r in fast], [r["score"] for r in ray_path], atol=1e-4)


def test_an_image_search_gives_the_answer_of_the_ray_path(indexed, capsys, tmp_path):
    data, videos, _ = indexed
    launch = videos["launch.mp4"]
    astro = launch.scene_of("astronaut")
    img = tmp_path / "query.png"
    Image.fromarray(distorted_frame(launch, (astro.start_s + astro.end_s) / 2)).save(img)
    fast = here(data, "--image", str(img), capsys=capsys)
    ray_path = here(data, "--address", "local", "--image", str(img), capsys=capsys)
    assert Path(fast[0]["source"]).name == "launch.mp4"
    assert [(r["video_id"], r["start_s"], r["end_s"]) for r in fast] == [
        (r["video_id"], r["start_s"], r["end_s"]) for r in ray_path
    ]
    assert np.allclose([r["score"] for r in fast], [r["score"] for r in ray_path], atol=1e-4)


def keep_all(tmp_path: Path, fraction: float = 0.0) -> str:
    """A config file setting ``min_relative_score`` (0: no moment dropped for its score)."""
    path = tmp_path / f"config-{fraction}.json"
    path.write_text(json.dumps({"min_relative_score": fraction}))
    return str(path)


def test_group_by_video_gives_each_video_once(indexed, capsys, tmp_path):
    data, videos, _ = indexed
    # visual only: its moments keep their cosines, so every video is listed (fused, unrelated ones are not)
    found = here(
        data,
        "--config",
        keep_all(tmp_path),
        "--group-by",
        "video",
        "--in",
        "visual",
        "--top-k",
        "10",
        "a cat",
        capsys=capsys,
    )
    ids = [r["video_id"] for r in found]
    assert len(ids) == len(set(ids)) == len(videos)
    assert Path(found[0]["source"]).name == "kitchen.mp4"


def test_a_video_not_ready_is_not_found(indexed, capsys, tmp_path):
    data, _, _ = indexed
    copy = tmp_path / "data"
    shutil.copytree(data, copy)
    with sqlite3.connect(copy / "catalog.db") as c:
        c.execute("UPDATE videos SET status = 'failed' WHERE source LIKE '%kitchen.mp4'")
    c.close()
    found = here(copy, "--top-k", "20", "a cat", capsys=capsys)
    assert found and not any(Path(r["source"]).name == "kitchen.mp4" for r in found)


def test_moments_far_below_the_best_are_dropped_when_configured(indexed, capsys, tmp_path):
    data, _, _ = indexed
    everything = here(
        data, "--config", keep_all(tmp_path), "--top-k", "20", "a rocket", capsys=capsys
    )
    cut = here(
        data, "--config", keep_all(tmp_path, 0.5), "--top-k", "20", "a rocket", capsys=capsys
    )
    assert cut == [r for r in everything if r["score"] >= 0.5 * everything[0]["score"]]
    assert len(cut) < len(everything)


def test_a_data_dir_with_nothing_indexed_says_so_and_is_not_made(tmp_path):
    proc = run(tmp_path / "nothing", "a cat")
    assert proc.returncode == 0, proc.stderr
    assert "no results" in proc.stdout
    assert not (tmp_path / "nothing").exists()
