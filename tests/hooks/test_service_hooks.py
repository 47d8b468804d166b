"""Webhooks end to end through a real Service (Ray, the ingest pool and its deliverer): a
receiver on 127.0.0.1 gets job.ready after an ingest, job.failed for a corrupt file and
video.deleted after a delete, each signed with the hook's secret."""

from __future__ import annotations

import time

import pytest

from tests._helpers import final_status
from tests.hooks._receiver import receiver, signed_by
from vifusion.config import Config
from vifusion.hooks import events
from vifusion.samples import write_demo_set


def _arrived(rx, kind: str, timeout_s: float = 60) -> dict:
    """The first ``kind`` event the receiver got, waiting for the deliverer's next rounds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := rx.events(kind):
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"no {kind} event arrived; got {rx.events()}")


@pytest.mark.slow
def test_a_service_sends_job_ready_job_failed_and_video_deleted(ray_session, tmp_path):
    from vifusion.service import Service

    kitchen = next(v for v in write_demo_set(tmp_path / "videos") if v.name == "kitchen.mp4")
    good = kitchen.path.read_bytes()
    cfg = Config(data_dir=tmp_path / "data", allow_private_urls=True, hook_poll_s=0.2)
    with receiver() as rx, Service(cfg) as svc:
        hook = events.register(svc.catalog, cfg, rx.url)
        with kitchen.path.open("rb") as f:
            ok = svc.ingest_upload(f, "kitchen.mp4")
        (tmp_path / "cut.mp4").write_bytes(good[: len(good) // 3])  # a video cut short
        with (tmp_path / "cut.mp4").open("rb") as f:
            bad = svc.ingest_upload(f, "cut.mp4")
        assert final_status(svc.catalog, ok.job_id) == "ready"
        assert final_status(svc.catalog, bad.job_id) == "failed"
        ready = _arrived(rx, "job.ready")
        failed = _arrived(rx, "job.failed")
        svc.delete(ok.video_id)
        deleted = _arrived(rx, "video.deleted")

        assert (ready["data"]["job_id"], ready["data"]["video_id"]) == (ok.job_id, ok.video_id)
        assert failed["data"]["job_id"] == bad.job_id and failed["data"]["error"]
        assert deleted["data"]["video_id"] == ok.video_id
        assert all(signed_by(hook.secret, r) for r in rx.got)
        assert len(rx.got) == 3  # each once
