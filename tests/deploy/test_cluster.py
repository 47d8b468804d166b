"""ViFusion on a real three-node Ray cluster: the network test bed (head + 2 workers in their
own namespaces, links shaped to 100 Mbit / 5 ms), a batch job through `ray job submit`, the
REST API of `vifusion serve`, Ray's state API for where actors run, interface counters for
the bytes that crossed the links.

Host 0 is the head (Serve, the job); host 1 carries the `shard` resource, host 2 the
`extract` one, as deploy/cluster.yaml's worker types do. The cluster runs as deploy/ sets it
up: Ray's mutual TLS with a certificate per node from one CA (deploy/tls.py), HTTPS at the
ingress with the head's certificate. Host 3 runs no Ray: an outsider on the same network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy import tls
from deploy.netbed import DASHBOARD_PORT, NetBed, available
from tests._helpers import json_from_bed
from vifusion.runtime import RAY_TUNED
from vifusion.samples import write_demo_set

pytestmark = pytest.mark.netbed
ROOT = Path(__file__).resolve().parents[2]
PORT = 8000

# Runs in host 0: everything the test asks of the cluster, answered as one JSON line.
CLIENT = r"""
import json, sys, time
import httpx

base, key, data, address, ca = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4], sys.argv[5]
auth = {"Authorization": f"Bearer {key}"}
out = {}
try:  # the same port in plain HTTP
    out["plain_http"] = httpx.get(base.replace("https://", "http://") + "/healthz", timeout=10).status_code
except httpx.HTTPError as e:
    out["plain_http"] = type(e).__name__
try:  # HTTPS, trusting only the system's CAs: the cluster's is not one of them
    out["untrusted"] = httpx.get(base + "/healthz", timeout=10).status_code
except httpx.HTTPError as e:
    out["untrusted"] = type(e).__name__
with httpx.Client(base_url=base, timeout=120, verify=ca) as c:
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


# As deploy/cluster.yaml runs Serve: its default ingress, whatever this test session set for
# the single-node tests (serve/deploy.py SERVE_TUNED).
SERVE_ENV = {"RAY_SERVE_ENABLE_HA_PROXY": "0", "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "1"}


@pytest.fixture(scope="module")
def bed():
    if (reason := available()) is not None:
        pytest.skip(reason)
    with NetBed(hosts=4, rate="100mbit", delay_ms=5) as bed:
        yield bed


@pytest.fixture(scope="module")
def certs(bed, tmp_path_factory) -> list[Path]:
    """Each Ray host's TLS folder, as deploy/cluster.yaml's setup makes it: the cluster's CA
    and a certificate of the host's own, for its address."""
    root = tmp_path_factory.mktemp("tls")
    ca = root / "ca"
    tls.make_ca(ca)
    folders = []
    for host in bed.hosts[:3]:
        folder = root / host.name
        folder.mkdir()
        for name in ("ca.crt", "ca.key"):
            (folder / name).write_bytes((ca / name).read_bytes())
        tls.make_node(folder, [host.ip, "localhost", "127.0.0.1"])
        folders.append(folder)
    return folders


@pytest.fixture(scope="module")
def address(bed, certs) -> str:
    """Ray with mutual TLS on hosts 0-2."""
    return bed.start_ray(
        num_cpus=2,
        resources=[{}, {"shard": 1}, {"extract": 1}],
        dashboard=True,
        object_store_memory=192 << 20,
        env={**SERVE_ENV, **RAY_TUNED},
        host_env=[tls.ray_env(folder) for folder in certs],
        nodes=3,
    )


@pytest.mark.slow
def test_three_nodes_index_by_job_and_api_and_find_every_video(bed, certs, address, tmp_path):
    head, shards, extract = (h.ip for h in bed.hosts[:3])
    videos = {v.name: v for v in write_demo_set(tmp_path / "videos")}
    data = tmp_path / "data"
    env = {**os.environ, **bed.ray_env, **SERVE_ENV, "PYTHONPATH": str(ROOT)}
    before = {i: bed.rx_bytes(i) for i in range(3)}
    head_cert = certs[0] / "node.crt"

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
            env=env
            | {
                "VIFUSION_TLS_CERTFILE": str(head_cert),
                "VIFUSION_TLS_KEYFILE": str(certs[0] / "node.key"),
            },
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
        got = json_from_bed(
            bed,
            [
                *(sys.executable, "-c", CLIENT, f"https://{head}:{PORT}", key),
                *(json.dumps(spec), address, str(certs[0] / "ca.crt")),
            ],
            timeout=900,
            env=env,
        )
    finally:
        server.terminate()
        server.wait(timeout=60)

    # the API answers over HTTPS only, with a certificate the cluster's CA vouches for
    assert got["plain_http"] in ("RemoteProtocolError", "ReadError", "ConnectError"), got
    assert got["untrusted"] == "ConnectError", got
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


# Runs in host 3 against the head: what Ray's client sees of the cluster.
NODES = r"""
import sys, ray
ray.init(address=sys.argv[1], log_to_driver=False)
print(sum(n["Alive"] for n in ray.nodes()))
"""


@pytest.mark.slow
@pytest.mark.parametrize("who", ["no certificate", "another CA's certificate"])
def test_a_host_without_the_clusters_certificate_cannot_join(bed, address, who, tmp_path):
    outsider = bed.hosts[3]
    env = {**os.environ, "RAY_USE_TLS": "0"}
    if who != "no certificate":
        tls.make_ca(tmp_path / "rogue")
        tls.make_node(tmp_path / "rogue", [outsider.ip, "localhost"])
        env |= tls.ray_env(tmp_path / "rogue")
    log = tmp_path / "ray-start.log"
    ray_cli = str(Path(sys.executable).with_name("ray"))
    with open(log, "w") as out:
        node = bed.exec(
            3,
            [ray_cli, "start", "--block", "--address", address, "--node-ip-address", outsider.ip]
            + ["--num-cpus", "1", "--temp-dir", str(bed.ray_temp_dir / "h3")],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    # Ray's raylet gives up on the GCS after 60 s: wait for it to have tried and failed.
    deadline = time.time() + 120
    refused = ("Handshake failed", "Failed to connect to GCS", "Timed out while waiting for GCS")
    while not any(r in log.read_text() for r in refused) and node.poll() is None:
        assert time.time() < deadline, log.read_text()[-3000:]
        time.sleep(1)
    node.kill()
    node.wait()
    # the cluster still has its three nodes, and the outsider's driver cannot reach it either
    inside = bed.exec(0, [sys.executable, "-c", NODES, address], stdout=subprocess.PIPE, text=True)
    assert inside.communicate(timeout=120)[0].strip().splitlines()[-1] == "3"
    probe = bed.exec(
        3,
        [sys.executable, "-c", NODES, address],
        env=env | {"RAY_gcs_rpc_server_connect_timeout_s": "5"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = probe.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        probe.kill()
        out = "(no answer)"
    assert probe.returncode != 0, out[-2000:]


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
