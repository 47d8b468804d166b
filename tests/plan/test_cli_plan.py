"""`vifusion plan`: from the YAML `ray up` takes to a plan the runtime reads."""

import json
from pathlib import Path

from vifusion.cli import main

ROOT = Path(__file__).resolve().parents[2]


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


def test_plan_needs_a_cluster_yaml_or_an_address(tmp_path, capsys):
    assert main(["plan", "--data-dir", str(tmp_path)]) == 2
    assert "give CLUSTER.yaml or --address" in capsys.readouterr().err
    assert main(["plan", str(tmp_path / "none.yaml"), "--data-dir", str(tmp_path)]) == 2
