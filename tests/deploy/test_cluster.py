"""ViFusion on a real three-node Ray cluster: the network test bed (head + 2 workers in their
own namespaces, links shaped to 100 Mbit / 5 ms), a batch job through `ray job submit`, the
REST API of `vifusion serve`, Ray's state API for where actors run, interface counters for
the bytes that crossed the links.

Host 0 is the head (Serve, the job); host 1 carries the `shard` resource, host 2 the
`extract` one, as deploy/cluster.yaml's worker types do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.netbed import DASHBOARD_PORT, NetBed, available
from vifusion.runtime import RAY_TUNED
from vifusion.samples import write_demo_set

pytestmark = pytest.mark.netbed
ROOT = Path(__file__).resolve().parents[2]
PORT = 8000

# Runs in host 0: everything the test asks of the cluster, answered as one JSON line.
CLIENT = r"""
import json, sys, time
import httpx

base, key, data, address = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
auth = {"Authorization": f"Bearer {key}"}
out = {}
with httpx.Client(base_url=base, timeout=120) as c:
    out["no_key"] = c.get("/v1/videos").status_code
    jobs = []
    for path in data["upload"]:
        with open(path, "rb") as f:
            r = c.post("/v1/videos", headers=auth, files={"file": (path.rsplit("/", 1)[-1], f, "video/mp4")})
        r.raise_for_status()
        jobs.append(r.json()["job_id"])
    deadline = time.time() + 600
    done = []
    for job in jobs:
        while True:
            j = c.get(f"/v1/jobs/{job}", headers=auth).json()
            if j["status"] in ("ready", "failed") or time.time() > deadline:
                done.append(j)
                break
            time.sleep(1)
    out["jobs"] = done
    out["videos"] = {v["title"].removesuffix(".mp4"): v["status"] for v in c.get("/v1/videos", headers=auth).json()["videos"]}
    out["search"] = {}
    for text in data["queries"]:
        r = c.post("/v1/search", headers=auth, json={"text": text, "top_k": 1, "group_by": "video"})
        r.raise_for_status()
        top = r.json()["results"][0]
        out["search"][text] = top["title"].removesuffix(".mp4")

import ray
from ray.util.state import list_actors

ray.init(address=address, log_to_driver=False)
ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
out["actors"] = {}
for a in list_actors(address=address, filters=[("state", "=", "ALIVE")], limit=1000):
    out["actors"].setdefault(a.class_name, []).append(ips.get(a.node_id))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def bed():
    if (reason := available()) is not None:
        pytest.skip(reason)
    with NetBed(hosts=3, rate="100mbit", delay_ms=5) as bed:
        yield bed


@pytest.mark.slow
def test_three_nodes_index_by_job_and_api_and_find_every_video(bed, tmp_path):
    # As deploy/cluster.yaml runs Serve: its default ingress, whatever this test session set
    # for the single-node tests (serve/app.py SERVE_TUNED).
    serve_env = {
        "RAY_SERVE_ENABLE_HA_PROXY": "0",
        "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "1",
    }
    address = bed.start_ray(
        num_cpus=2,
        resources=[{}, {"shard": 1}, {"extract": 1}],
        dashboard=True,
        object_store_memory=192 << 20,
        env={**serve_env, **RAY_TUNED},
    )
    head, shards, extract = (h.ip for h in bed.hosts)
    videos = {v.name: v for v in write_demo_set(tmp_path / "videos")}
    data = tmp_path / "data"
    env = {**os.environ, **bed.ray_env, **serve_env, "PYTHONPATH": str(ROOT)}
    before = {i: bed.rx_bytes(i) for i in range(3)}

    # A batch job: one video from a list file, through Ray's job API.
    listing = tmp_path / "batch.txt"
    listing.write_text("videos/kitchen.mp4\n")
    ray_cli = str(Path(sys.executable).with_name("ray"))
    entry = f"{sys.executable} -m vifusion.cli index --address auto --data-dir {data} {listing}"
    job = bed.exec(
        0,
        [
            ray_cli,
            "job",
            "submit",
            "--address",
            f"http://{head}:{DASHBOARD_PORT}",
            "--",
            *entry.split(),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log, _ = job.communicate(timeout=600)
    assert job.returncode == 0, log[-3000:]
    assert "indexed 1 video(s)" in log, log[-3000:]

    # The service, then two uploads through the REST API.
    serve_log = tmp_path / "serve.log"
    with open(serve_log, "w") as out:
        server = bed.exec(
            0,
            [
                sys.executable,
                "-m",
                "vifusion.cli",
                "serve",
                "--address",
                address,
                "--data-dir",
                str(data),
                "--host",
                head,
                "--port",
                str(PORT),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.time() + 300
        while "ViFusion is serving" not in serve_log.read_text():
            assert server.poll() is None and time.time() < deadline, serve_log.read_text()[-3000:]
            time.sleep(1)
        key = (data / "api_key").read_text().strip()
        spec = {
            "upload": [str(videos[n].path) for n in ("launch.mp4", "street.mp4")],
            "queries": ["a cat", "a rocket", "a motorcycle"],
        }
        client = bed.exec(
            0,
            [sys.executable, "-c", CLIENT, f"http://{head}:{PORT}", key, json.dumps(spec), address],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        got_out, got_err = client.communicate(timeout=900)
        assert client.returncode == 0, got_err[-3000:]
        got = json.loads(got_out.strip().splitlines()[-1])
    finally:
        server.terminate()
        server.wait(timeout=60)

    assert got["no_key"] == 401
    assert [j["status"] for j in got["jobs"]] == ["ready", "ready"], got["jobs"]
    # every video searchable, each query's best video the one that shows it
    # the job names a video by its file's stem, an upload by its file name
    assert got["videos"] == {"kitchen": "ready", "launch": "ready", "street": "ready"}
    assert got["search"] == {"a cat": "kitchen", "a rocket": "launch", "a motorcycle": "street"}
    # placement, from Ray's state API: shards on the shard node, extractors on the extract node,
    # one aggregator per node
    actors = got["actors"]
    assert actors["ShardReplica"] and set(actors["ShardReplica"]) == {shards}
    assert set(actors["Extractor"]) == {extract}
    assert sorted(actors["Aggregator"]) == sorted([head, shards, extract])
    # features crossed the shaped link from the extract node to the shard node: at least the
    # smallest codec the aggregator may use (int8, 1672 bytes a row) for every frame sampled
    frames = sum(round(v.duration_s) for v in videos.values())  # 1 frame a second
    assert bed.rx_bytes(1) - before[1] >= frames * 1672


def test_tear_down_leaves_nothing_behind(bed):
    name = bed.bed
    bed.down()
    names = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True
    ).stdout
    assert name not in names
    left = subprocess.run(
        ["pgrep", "-f", f"/tmp/{name}-ray"], capture_output=True, text=True, check=False
    ).stdout.split()
    assert left == []
