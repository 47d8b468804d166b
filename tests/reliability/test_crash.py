"""The whole service killed with SIGKILL mid-ingest, then started again on the same data dir.

The service runs as its own driver process on the session's Ray (as `vifusion serve
--address` does on a cluster): SIGKILL takes the process and, with it, every actor it owned
(shards, extractors, aggregators). The second start must finish every acknowledged job,
and the catalog and the shards must agree (`vifusion check`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray

from vifusion.catalog import open_catalog
from vifusion.config import Config
from vifusion.samples import write_video

ROOT = Path(__file__).resolve().parents[2]

SERVICE = r"""
import json, sys, time
from pathlib import Path
import ray
from vifusion.config import Config
from vifusion.service import Service

address, data, videos = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
cfg = Config(data_dir=data, ray_address=address, sample_fps=4.0, dedup_cosine=1.01, embed_batch=8,
             ingest_roots=(Path(videos[0]).parent,) if videos else ())
with Service(cfg) as svc:  # starts the ingest queue: acknowledged jobs left over run again
    for v in videos:
        svc.ingest_uri(Path(v).as_uri())
    print("UP", ray.get_runtime_context().get_job_id(), flush=True)
    from vifusion.cli.check import find_drift
    while True:
        jobs = [svc.catalog.get_job(j.id) for j in svc.catalog.jobs_in(("queued", "decoding", "indexing"))]
        if not jobs and not videos:
            drift = find_drift(svc.catalog, svc.shards)
            print("DONE", json.dumps([d.kind for d in drift]), flush=True)
            break
        time.sleep(0.5)
"""


def start(address: str, data: Path, videos: list[Path]) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "RAY_AUTH_MODE": "token", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVICE, address, str(data), json.dumps([str(v) for v in videos])],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = proc.stdout.readline()
    assert line.startswith("UP"), line
    return proc, line.split()[1]


def alive_actors_of(job_id: str) -> int:
    return sum(
        1
        for a in ray._private.state.actors().values()
        if a["State"] == "ALIVE" and a["JobID"] == job_id
    )


@pytest.mark.slow
def test_a_service_killed_mid_ingest_finishes_its_jobs_when_started_again(ray_session, tmp_path):
    videos = [
        write_video(tmp_path / "videos" / f"v{i}.mp4", photos, scene_s=3.0).path
        for i, photos in enumerate([("coffee", "rocket"), ("camera", "coins"), ("hubble", "ihc")])
    ]
    data = tmp_path / "data"
    address = ray.get_runtime_context().gcs_address
    first, job = start(address, data, videos)
    catalog = open_catalog(Config(data_dir=data))
    deadline = time.monotonic() + 300
    while not any(
        j.status == "indexing" and j.frames_indexed > 0 for j in catalog.jobs_in(("indexing",))
    ):
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    while alive_actors_of(job):  # Ray takes the dead driver's actors down with it
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert {j.status for j in catalog.jobs_in(("queued", "decoding", "indexing"))}, (
        "nothing was left to resume"
    )

    second, _ = start(address, data, [])
    out, _ = second.communicate(timeout=600)
    assert second.returncode == 0
    drift = json.loads(out.split("DONE", 1)[1])
    assert drift == []  # the catalog and the shards agree
    statuses = {v.id: v.status for v in catalog.list_videos(100)}
    assert sorted(statuses.values()) == ["ready"] * 3, statuses
