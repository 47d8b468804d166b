"""`vifusion list`, `delete` and `status` on a real data dir (a copy of the session's `indexed`
one: the demo videos and the bad inputs that failed), without a service."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests._helpers import run_cli


def listed(data: Path, capsys, *args: str) -> list[dict]:
    code, out, err = run_cli(capsys, "list", "--data-dir", str(data), "--json", *args)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def status(data: Path, capsys) -> dict:
    code, out, err = run_cli(capsys, "status", "--data-dir", str(data), "--json")
    assert code == 0, err
    return json.loads(out)


def test_list_shows_each_video_with_its_status_and_a_failed_ones_reason(indexed_copy, capsys):
    data, videos = indexed_copy
    rows = listed(data, capsys)
    ready = {Path(r["source"]).name: r for r in rows if r["status"] == "ready"}
    assert set(ready) == set(videos)
    kitchen = ready["kitchen.mp4"]
    assert kitchen["frames"] > 0 and kitchen["duration_s"] == videos["kitchen.mp4"].duration_s
    assert kitchen["title"] == "kitchen" and kitchen["added"] and kitchen["error"] is None
    failed = listed(data, capsys, "--status", "failed")
    assert {Path(r["source"]).name for r in failed} >= {"notes.mp4", "empty.mp4"}
    assert all(r["status"] == "failed" and r["error"] for r in failed)
    code, out, _ = run_cli(capsys, "list", "--data-dir", str(data))
    assert code == 0 and "kitchen" in out and "ready" in out
    assert any("notes.mp4" in line for line in out.splitlines())


def test_status_counts_videos_and_jobs_and_each_shards_rows(indexed_copy, capsys):
    data, videos = indexed_copy
    frames = sum(r["frames"] for r in listed(data, capsys, "--status", "ready"))
    s = status(data, capsys)
    assert s["service"] is None and s["visual_model"] == "default"
    assert s["videos"]["ready"] == len(videos) and s["videos"]["failed"] >= 2
    assert s["jobs"]["counts"]["ready"] == len(videos) and s["jobs"]["running"] == []
    assert s["jobs"]["recent_failures"] and all(j["error"] for j in s["jobs"]["recent_failures"])
    visual = sum(sh["rows"]["visual"] for sh in s["shards"])
    assert 0 < visual <= frames  # near-duplicate frames are stored once
    assert sum(sh["rows"]["semantic"] for sh in s["shards"]) == visual
    assert sum(sh["videos"] for sh in s["shards"]) == len(videos)
    assert all(sh["log_bytes"] > 0 or sh["snapshot_at"] for sh in s["shards"] if sh["videos"])
    code, out, _ = run_cli(capsys, "status", "--data-dir", str(data))
    assert (
        code == 0 and "none running" in out and f"{len(videos)} ready" in out and "shard 0:" in out
    )


def test_delete_removes_a_video_everywhere_and_names_an_unknown_one(indexed_copy, capsys):
    data, videos = indexed_copy
    ids = {Path(r["source"]).name: r["video_id"] for r in listed(data, capsys, "--status", "ready")}
    shards_before = status(data, capsys)["shards"]
    code, out, err = run_cli(
        capsys, "delete", "--data-dir", str(data), str(ids["kitchen.mp4"]), "99999"
    )
    assert code == 1
    assert f"deleted video {ids['kitchen.mp4']}" in out and "not found: video 99999" in err
    assert ids["kitchen.mp4"] not in {r["video_id"] for r in listed(data, capsys)}
    shards = status(data, capsys)["shards"]
    assert sum(sh["videos"] for sh in shards) == sum(sh["videos"] for sh in shards_before) - 1
    code, out, err = run_cli(
        capsys,
        "search",
        "--data-dir",
        str(data),
        "--json",
        "--top-k",
        "50",
        "--group-by",
        "video",
        "a cat",
    )
    assert code == 0, err
    assert ids["kitchen.mp4"] not in {json.loads(line)["video_id"] for line in out.splitlines()}
    code, out, err = run_cli(capsys, "check", "--data-dir", str(data))
    assert code == 0 and out.startswith("consistent"), out + err
    assert videos["kitchen.mp4"].path.is_file()  # indexed in place: the user's file stays


def test_delete_while_another_process_writes_exits_2_and_deletes_nothing(indexed_copy, capsys):
    data, _ = indexed_copy
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('locked', flush=True); time.sleep(120)",
            str(data / "writer.lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = listed(data, capsys)
        code, out, err = run_cli(
            capsys, "delete", "--data-dir", str(data), str(before[0]["video_id"])
        )
        assert code == 2 and not out
        assert err.startswith("vifusion delete: another vifusion process is writing to"), err
        assert listed(data, capsys) == before
    finally:
        holder.kill()
        holder.wait()


def test_list_status_and_delete_of_a_folder_that_is_no_data_dir(tmp_path, capsys):
    for argv in (["list"], ["status"], ["delete", "1"]):
        code, _, err = run_cli(capsys, *argv, "--data-dir", str(tmp_path))
        assert code == 2 and "no catalog in" in err, (argv, err)
    assert not (tmp_path / "catalog.db").exists()
