"""GET /v1/jobs/{id} says what happened to a video's audio (``warnings``) and where a job
failed (``stage``), through the live service."""

from __future__ import annotations

from tests.media import audio_only
from tests.serve.conftest import Live
from vifusion.samples import talks as _talks


def _upload(live: Live, path) -> dict:
    with open(path, "rb") as f:
        r = live.client.post(
            "/v1/videos", files={"file": (path.name, f, "application/octet-stream")}
        )
    assert r.status_code == 202, r.text
    return r.json()


def test_a_video_without_audio_is_ready_with_a_warning(live: Live, tmp_path) -> None:
    talk = _talks.write_talk(
        tmp_path / "slides.mp4", 2.0, audio="none", shown=[(0.0, 2.0, ["Quarterly revenue"])]
    )
    queued = _upload(live, talk.path)
    job = live.vf.wait(queued["job_id"])
    try:
        assert job["status"] == "ready" and job["frames_indexed"] == 2 and job["error"] is None
        assert job["stage"] is None and job["warnings"] == ["slides.mp4: no audio track"]
    finally:
        assert live.client.delete(f"/v1/videos/{queued['video_id']}").status_code == 204


def test_an_audio_only_file_fails_at_probe_saying_why(live: Live, tmp_path) -> None:
    path = tmp_path / "voice.m4a"
    audio_only(path, 1.0)
    queued = _upload(live, path)
    job = live.vf.wait(queued["job_id"])
    try:
        assert job["status"] == "failed" and job["stage"] == "probing" and job["warnings"] == []
        assert job["error"].endswith("not a video (no video stream)"), job["error"]
    finally:
        assert live.client.delete(f"/v1/videos/{queued['video_id']}").status_code == 204
