"""`vifusion reindex`: the library embedded again with another visual model (a random-weight
OpenCLIP model of the real architecture), searches answering from the old vectors meanwhile,
then the switch; and what it refuses."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import av
import numpy as np
import pytest

from tests._helpers import cli_process, run_cli
from tests.extract._clip import EMBED_DIM, tiny_clip
from vifusion.config import Config
from vifusion.index.layout import index_dir, shard_dir
from vifusion.index.model import ModelMismatch, recorded
from vifusion.types import VISUAL_DIM


def _search(data: Path, *args: str) -> subprocess.CompletedProcess:
    """`vifusion search` in a process of its own, as a user runs it beside the reindex."""
    return cli_process("search", "--data-dir", str(data), "--json", *args)


@pytest.mark.slow
def test_reindex_switches_to_the_new_model_while_searches_answer(indexed_copy, tmp_path):
    from vifusion.index.local import LocalShards
    from vifusion.ingest.reindex import reindex

    data, videos = indexed_copy
    spec = tiny_clip(tmp_path / "clip")
    during: list[subprocess.CompletedProcess] = []

    def progress(done: int, total: int) -> None:
        if done == 1:  # mid-way: the old vectors answer, with the old model
            during.append(_search(data, "a cat"))

    cfg = Config(data_dir=data, visual_model=spec)
    done = reindex(cfg, progress)

    assert during and during[0].returncode == 0, during[0].stderr
    assert any(json.loads(line)["video_id"] for line in during[0].stdout.splitlines())
    assert done.videos >= 1 and not done.skipped
    # switched: a new folder in use, the old shards gone, each shard records the new model
    assert index_dir(data).name == "gen-1"
    assert not list((data / "index").glob("shard-*"))
    assert recorded(shard_dir(data, 0)).name == "open_clip:tiny-clip"
    # the frames are the new model's: its 256 dimensions, where the default filled 1280
    shards = LocalShards(cfg)
    video = next(v for v in range(1, 50) if shards.frames("visual", v, 0, 1e6)[1].size)
    _, vectors = shards.frames("visual", video, 0, 1e6)
    assert vectors.shape[1] == VISUAL_DIM and not vectors[:, EMBED_DIM:].any()
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-3)
    # searches with the new model answer from its space, the model the index records (no
    # visual_model given): a still of a video finds that video
    still = tmp_path / "still.png"
    with av.open(str(videos["kitchen.mp4"].path)) as container:
        frame = next(f for f in container.decode(video=0) if f.time >= 1.0)
        frame.to_image().save(still)
    after = cli_process(
        "search",
        "--data-dir",
        str(data),
        "--json",
        "--image",
        str(still),
    )
    assert after.returncode == 0, after.stderr
    found = [json.loads(line) for line in after.stdout.splitlines() if line.startswith("{")]
    assert found and found[0]["source"].endswith("kitchen.mp4"), found[:3]
    shown = cli_process("status", "--data-dir", str(data), "--json")
    assert json.loads(shown.stdout)["visual_model"] == spec  # the index's, none configured
    with pytest.raises(ModelMismatch, match="open_clip:tiny-clip.*efficientnet-lite0"):
        LocalShards(Config(data_dir=data))


def test_reindex_is_refused_while_another_writes_the_data_dir(tmp_path, capsys):
    from vifusion.datadir import writer_lock

    with writer_lock(tmp_path):
        code, _, err = run_cli(capsys, "reindex", "--quiet", "--data-dir", str(tmp_path))
    assert code == 2 and "vifusion reindex:" in err


def test_reindex_with_missing_weights_says_so_and_changes_nothing(tmp_path, capsys):
    spec = f"open_clip:ViT-B-32:{tmp_path / 'nowhere.pt'}"
    code, _, err = run_cli(
        capsys, "reindex", "--quiet", "--data-dir", str(tmp_path), "--visual-model", spec
    )
    assert code == 1 and "nowhere.pt" in err
    assert not list((tmp_path / "index").glob("gen-*"))


@pytest.mark.slow
def test_a_reindex_with_the_same_model_gives_each_frame_the_vectors_ingest_gave_it(
    indexed_copy,
):
    """The reindex embeds as the extractor does (concepts, hypernyms, the people detector's
    face words): a frame ingest kept has the same vectors after it, in both frame spaces."""
    from vifusion.index.local import LocalShards
    from vifusion.ingest.reindex import reindex

    data, _ = indexed_copy
    cfg = Config(data_dir=data)
    before = LocalShards(cfg)
    ids = [v for v in range(1, 50) if before.frames("visual", v, 0, 1e6)[1].size]
    kept = {
        (space, v): before.frames(space, v, 0, 1e6) for space in ("visual", "semantic") for v in ids
    }
    done = reindex(cfg)
    assert done.videos == len(ids) and not done.skipped
    after = LocalShards(cfg)
    compared = 0
    for (space, v), (times, vectors) in kept.items():
        new_times, new_vectors = after.frames(space, v, 0, 1e6)
        row = {tuple(t): i for i, t in enumerate(new_times.tolist())}
        for t, vec in zip(times.tolist(), vectors, strict=True):
            if tuple(t) in row:  # a frame ingest kept (its dedup folded some into others)
                assert np.allclose(new_vectors[row[tuple(t)]], vec, atol=0.02), (space, v, t)
                compared += 1
    assert compared >= len(kept)  # at least a frame a video and space
