"""One live service for every serve test: the real Serve app on the session's Ray, on a
fresh data dir, with the demo videos ingested through the API itself (two uploads and a
``file://`` uri) before any test runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from ray import serve

from tests.conftest import free_port
from vifusion.client import Client
from vifusion.config import Config
from vifusion.samples import SampleVideo, write_demo_set

KEY = "test-key-0123456789abcdefghijklmnopqrstuv"  # 32+ characters, as the service requires
MAX_UPLOAD = 8 << 20  # small, so the 413 test sends little


@dataclass
class Live:
    url: str
    cfg: Config
    client: (
        httpx.Client
    )  # sends the key: for tests of the HTTP itself (status codes, headers, bodies)
    anon: httpx.Client  # sends no key
    vf: Client  # the Python client, as a user's program calls the API
    videos: dict[str, SampleVideo]
    ids: dict[str, int]  # sample name -> video_id
    root: Path  # the ingest root; the videos are in root / "videos"
    vectors: (
        int  # vectors held once the three demo videos are in (fewer than frames: temporal dedup)
    )


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
    vf = Client(url, KEY)
    accepted: dict[str, dict] = {}
    for name in ("kitchen.mp4", "street.mp4"):
        accepted[name] = vf.upload(videos[name].path, metadata={"set": "demo", "upload": True})
    accepted["launch.mp4"] = vf.add_uri(
        videos["launch.mp4"].path.as_uri(),
        title="launch",
        metadata={"set": "demo", "upload": False},
    )
    for name, a in accepted.items():
        assert vf.wait(a["job_id"], timeout_s=300)["status"] == "ready", name
    ids = {name: a["video_id"] for name, a in accepted.items()}
    vectors = vf.health()["vectors"]
    assert 0 < vectors <= 36  # 3 x 12 sampled frames, near-duplicates merged
    yield Live(url, cfg, client, anon, vf, videos, ids, root, vectors)
    client.close()
    anon.close()
    vf.close()
    serve.delete("vifusion")
    serve.shutdown()
