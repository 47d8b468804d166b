"""Retrying a failed video (``POST /v1/videos/{id}/retry``, ``Client.retry``): a failed video is
queued again with a new job; one that has not failed is a 409, one whose file is gone a 410."""

from __future__ import annotations

import hashlib
import shutil

import pytest

from tests.serve.test_app import error
from vifusion.catalog import open_catalog
from vifusion.client import ApiError, Client


@pytest.fixture()
def vf(live):
    with Client(live.url, live.cfg.api_key) as client:
        yield client


@pytest.fixture()
def broken(live, vf):
    """A ``file://`` video inside the ingest roots whose file is cut short: its job fails.
    Yields (video_id, path, the failed job's id); deleted afterwards."""
    path = live.root / "videos" / "retry-me.mp4"
    good = live.videos["street.mp4"].path.read_bytes()
    path.write_bytes(good[: len(good) // 3])
    accepted = vf.add_uri(path.as_uri(), title="cut short")
    job = vf.wait(accepted["job_id"], timeout_s=300)
    assert job["status"] == "failed", job
    yield accepted["video_id"], path, accepted["job_id"]
    vf.delete(accepted["video_id"])
    path.unlink(missing_ok=True)


def test_a_failed_video_is_indexed_again_once_its_file_is_fixed(live, vf, broken):
    video_id, path, first_job = broken
    failed = vf.video(video_id)
    assert failed["status"] == "failed" and failed["error"]
    assert failed["job_id"] == first_job and failed["stage"]  # the stage it failed in

    shutil.copyfile(live.videos["street.mp4"].path, path)  # the whole file now
    again = vf.retry(video_id)
    assert (
        again["video_id"] == video_id
        and again["status"] == "queued"
        and again["job_id"] != first_job
    )
    listed = next(v for v in vf.videos() if v["video_id"] == video_id)
    assert (
        listed["job_id"] == again["job_id"] and listed["status"] != "failed"
    )  # the library follows the new job
    # while it is queued or running it is not failed: a second retry would index it twice
    with pytest.raises(ApiError) as twice:
        vf.retry(video_id)
    assert twice.value.status == 409 and twice.value.code == "not_failed"
    job = vf.wait(again["job_id"], timeout_s=300)
    assert job["status"] == "ready", job
    video = vf.video(video_id)
    assert video["status"] == "ready" and video["error"] is None and video["frames_indexed"] > 0
    # the fixed file's content hash, not the cut one's: what is indexed is what a duplicate is checked against
    catalog = open_catalog(live.cfg, read_only=True)
    try:
        assert catalog.get_video(video_id).sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    finally:
        catalog.close()


def test_a_video_whose_file_is_gone_is_a_410(live, broken):
    video_id, path, _ = broken
    path.unlink()
    message = error(live.client.post(f"/v1/videos/{video_id}/retry"), 410, "source_gone")
    assert "retry-me.mp4" in message
    assert live.client.get(f"/v1/videos/{video_id}").json()["status"] == "failed"  # left as it was


def test_only_a_failed_video_is_retried(live):
    error(live.client.post(f"/v1/videos/{live.ids['kitchen.mp4']}/retry"), 409, "not_failed")
    error(live.client.post("/v1/videos/999999/retry"), 404, "not_found")
    error(live.anon.post(f"/v1/videos/{live.ids['kitchen.mp4']}/retry"), 401, "unauthorized")
