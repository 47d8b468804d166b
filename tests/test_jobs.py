"""The ingest queue: acknowledged jobs survive a crash and run when the service starts again;
URL sources are fetched by their job."""

from __future__ import annotations

import functools
import http.server
import threading
import time

import pytest

from vifusion.catalog import Catalog
from vifusion.config import Config
from vifusion.samples import write_demo_set


def wait(catalog: Catalog, job_id: str, timeout_s: float = 300) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = catalog.get_job(job_id).status
        if status in ("ready", "failed"):
            return status
        time.sleep(0.3)
    raise TimeoutError(job_id)


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    return {v.name: v for v in write_demo_set(tmp_path_factory.mktemp("jobs-videos"))}


@pytest.fixture
def http_root(videos):
    handler = functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(videos["street.mp4"].path.parent)
    )
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.slow
def test_interrupted_and_queued_jobs_run_after_a_restart_and_urls_are_fetched(
    ray_session, tmp_path, videos, http_root
):
    from vifusion.service import Service

    # dedup off: every sampled frame is one vector, so counts below are frames
    cfg = Config(data_dir=tmp_path / "data", allow_private_urls=True, dedup_cosine=1.01)
    # What a crash leaves: one job caught mid-indexing, one still queued (both acknowledged).
    catalog = Catalog(cfg.data_dir / "catalog.db")
    cut, cut_job = catalog.add_video(str(videos["kitchen.mp4"].path), "kitchen")
    catalog.update_job(cut_job, "indexing", progress=0.5, frames_indexed=6)
    queued, queued_job = catalog.add_video(str(videos["launch.mp4"].path), "launch")
    catalog.close()

    with Service(cfg) as service:
        fetched = service.ingest_uri(f"{http_root}/street.mp4", metadata={"via": "http"})
        missing = service.ingest_uri(f"{http_root}/nope.mp4")
        for job in (cut_job, queued_job, fetched.job_id):
            assert wait(service.catalog, job) == "ready"
        assert wait(service.catalog, missing.job_id) == "failed"
        assert "HTTP 404" in service.job(missing.job_id).error
        street = service.video(fetched.video_id)
        assert street.media_path.read_bytes() == videos["street.mp4"].path.read_bytes()
        assert street.title == "street" and street.frames_indexed == 12
        assert service.health()["vectors"] == 36  # 3 x 12 frames: the re-run added none twice
        page = service.search(text="a cat", top_k=1)
        assert page.results[0].video_id == cut
        jpeg = service.thumbnail(fetched.video_id, 3.0)
        assert jpeg[:3] == b"\xff\xd8\xff"
        service.delete(fetched.video_id)
        assert not street.media_path.exists()
        assert service.health()["vectors"] == 24
