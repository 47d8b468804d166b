"""One live service for every serve test: the real Serve app on the session's Ray, on a
fresh data dir, with the demo videos ingested through the API itself (two uploads and a
``file://`` uri) before any test runs."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from ray import serve

from vifusion.config import Config
from vifusion.samples import SampleVideo, write_demo_set

KEY = "test-key-0123456789abcdefghijklmnopqrstuv"  # 32+ characters, as the service requires
MAX_UPLOAD = 8 << 20  # small, so the 413 test sends little


@dataclass
class Live:
    url: str
    cfg: Config
    client: httpx.Client  # sends the key
    anon: httpx.Client  # sends no key
    videos: dict[str, SampleVideo]
    ids: dict[str, int]  # sample name -> video_id
    root: Path  # the ingest root; the videos are in root / "videos"
    vectors: int  # vectors held once the three demo videos are in (fewer than frames: temporal dedup)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(client: httpx.Client, job_id: str, timeout_s: float = 300) -> dict:
    """Poll a job until it is ready or failed; return its last state."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in ("ready", "failed"):
            return job
        time.sleep(0.5)
    raise TimeoutError(f"job {job_id} still {job['status']} after {timeout_s} s")


@pytest.fixture(scope="session")
def live(ray_session, tmp_path_factory) -> Live:
    from serve.app import ViFusionApp

    root = tmp_path_factory.mktemp("serve")
    videos = {v.name: v for v in write_demo_set(root / "videos")}
    cfg = Config(
        data_dir=root / "data",
        api_key=KEY,
        ingest_roots=(root / "videos",),
        max_upload_bytes=MAX_UPLOAD,
        max_query_clip_bytes=1 << 20,  # small, so the 413 test sends little
        thumbnail_cache_bytes=128 << 10,  # a few dozen thumbnails reach it
        rate_limit_rps=1000,
        rate_limit_burst=5000,
        rate_limit_media_rps=1000,
        rate_limit_media_burst=5000,
    )
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(ViFusionApp.bind(cfg), name="vifusion", route_prefix="/")
    url = f"http://127.0.0.1:{port}"
    client = httpx.Client(base_url=url, timeout=120, headers={"Authorization": f"Bearer {KEY}"})
    anon = httpx.Client(base_url=url, timeout=60)
    jobs: dict[str, str] = {}
    ids: dict[str, int] = {}
    for name in ("kitchen.mp4", "street.mp4"):
        with open(videos[name].path, "rb") as f:
            r = client.post("/v1/videos", files={"file": (name, f, "video/mp4")},
                            data={"metadata": '{"set": "demo", "upload": true}'})
        assert r.status_code == 202, r.text
        jobs[name], ids[name] = r.json()["job_id"], r.json()["video_id"]
    r = client.post("/v1/videos", json={"uri": videos["launch.mp4"].path.as_uri(), "title": "launch",
                                        "metadata": {"set": "demo", "upload": False}})
    assert r.status_code == 202, r.text
    jobs["launch.mp4"], ids["launch.mp4"] = r.json()["job_id"], r.json()["video_id"]
    for name, job_id in jobs.items():
        assert wait_ready(client, job_id)["status"] == "ready", name
    vectors = anon.get("/healthz").json()["vectors"]
    assert 0 < vectors <= 36  # 3 x 12 sampled frames, near-duplicates merged
    yield Live(url, cfg, client, anon, videos, ids, root, vectors)
    client.close()
    anon.close()
    serve.delete("vifusion")
    serve.shutdown()
