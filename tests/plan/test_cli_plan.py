"""`vifusion plan`: from the YAML `ray up` takes to a plan the runtime reads."""

import json
from pathlib import Path

import pytest

from vifusion.cli.parser import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_plan_from_the_cluster_yaml_prints_it_and_applies_it(tmp_path, capsys):
    code = main(
        [
            "plan",
            str(ROOT / "deploy" / "cluster.yaml"),
            "--link",
            "shard_mem=20mbit/10",
            "--data-dir",
            str(tmp_path),
            "--apply",
            "--json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    written = json.loads((tmp_path / "plan.json").read_text())
    assert out["plan"] == written and out["applied"] == str(tmp_path / "plan.json")
    assert sum(n["extractors"] for n in written["nodes"]) >= 1 and len(written["shards"]) == 2
    assert out["candidates_evaluated"] + out["candidates_pruned"] == out["candidates"]
    assert out["even"]["predicted_fps"] <= written["predicted_fps"]
    cached = list((tmp_path / "plan").glob("calibration-*.json"))  # for the next run
    assert cached
    costs = json.loads(cached[0].read_text())
    # Process CPU a frame, alone and with another process embedding at once.
    assert costs["embed_cs"] > 0 and costs["embed_cs_crowded"] > 0
    # A text search: its text's embedding, and a shard's search a row it holds.
    assert costs["query_cs"] > 0 and costs["search_row_cs"] > 0

    # For a batch, from the costs just cached: the plan says what it was made for.
    argv = ["plan", str(ROOT / "deploy" / "cluster.yaml"), "--data-dir", str(tmp_path)]
    assert main([*argv, "--batch", "6", "--video-s", "30"]) == 0
    assert "planned for a batch of 6 videos of 30 s at 4 Mbit/s:" in capsys.readouterr().out
    assert main([*argv, "--batch", "6", "--video-s", "30", "--json"]) == 0
    videos = json.loads(capsys.readouterr().out)["plan"]["videos"]
    assert videos == {
        "plan_video_mbps": 4.0,
        "plan_batch_videos": 6,
        "plan_video_s": 30.0,
        "plan_queries_per_s": 0.0,
        "plan_index_rows": 1_000_000,
        "plan_query_p50_s": 0.5,
    }

    # Searches served meanwhile: their p50 is predicted, and the plan records what it served.
    searched = [*argv, "--queries-per-s", "4", "--index-rows", "200000"]
    assert main(searched) == 0
    printed = capsys.readouterr().out
    assert "serving 4 searches/s over 200,000 rows" in printed and "searches' p50" in printed
    assert main([*searched, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert plan["predicted_query_p50_s"] > 0 and plan["videos"]["plan_queries_per_s"] == 4.0


def test_plan_needs_a_cluster_yaml_or_an_address(tmp_path, capsys):
    assert main(["plan", "--data-dir", str(tmp_path)]) == 2
    assert "give CLUSTER.yaml or --address" in capsys.readouterr().err
    assert main(["plan", str(tmp_path / "none.yaml"), "--data-dir", str(tmp_path)]) == 2
    capsys.readouterr()
    yaml = str(ROOT / "deploy" / "cluster.yaml")
    assert main(["plan", yaml, "--batch", "-1", "--data-dir", str(tmp_path)]) == 2
    assert "plan_batch_videos" in capsys.readouterr().err
