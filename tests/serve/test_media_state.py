"""What a key holder can read back: a ``file://`` source is sniffed as an upload is (a text
file under an ingest root, a ``.env`` or a token, is a 415 at ingest, never queued), and
``/media`` serves a video's file only once the decoder has probed it as a video (queued, or
failed before that: 409 ``not_playable``), and only while its first bytes still look like one."""

from __future__ import annotations

import pytest

from tests.serve.test_app import error

SECRET = b"API_TOKEN=0123456789abcdef0123456789abcdef\nDB_PASSWORD=hunter2\n"


@pytest.mark.parametrize("name", [".env", "token.mp4"])
def test_a_text_file_under_an_ingest_root_is_refused_at_ingest(live, name):
    path = live.root / "videos" / name
    path.write_bytes(SECRET)
    before = live.vf.videos()
    try:
        r = live.client.post("/v1/videos", json={"uri": path.as_uri()})
        assert "text, not a video" in error(r, 415, "unsupported_media_type")
        assert live.vf.videos() == before  # nothing queued
    finally:
        path.unlink()


def test_the_media_of_a_video_not_decoded_as_one_is_not_served(live):
    blob = bytes(range(256)) * 64  # binary, no known signature: the sniff lets it through
    r = live.client.post("/v1/videos", files={"file": ("blob.mp4", blob, "video/mp4")})
    assert r.status_code == 202, r.text
    video_id, job_id = r.json()["video_id"], r.json()["job_id"]
    try:
        # queued, or its job under way: its bytes are only what the client sent
        error(live.client.get(f"/v1/videos/{video_id}/media"), 409, "not_playable")
        error(live.client.post(f"/v1/videos/{video_id}/media-url"), 409, "not_playable")
        assert live.vf.wait(job_id, timeout_s=300)["status"] == "failed"
        message = error(live.client.get(f"/v1/videos/{video_id}/media"), 409, "not_playable")
        assert "failed" in message and "not a video" in message, message
    finally:
        live.vf.delete(video_id)


def test_a_file_uri_video_rewritten_as_text_after_indexing_is_not_served(live):
    video_id = live.ids["launch.mp4"]  # ingested as a file:// uri, ready
    path = live.videos["launch.mp4"].path
    kept = path.read_bytes()
    with open(path, "r+b") as f:  # the same file, its content now a secret
        f.write(SECRET)
        f.truncate()
    try:
        message = error(live.client.get(f"/v1/videos/{video_id}/media"), 409, "not_playable")
        assert "text, not a video" in message, message
    finally:
        path.write_bytes(kept)
    assert live.client.get(f"/v1/videos/{video_id}/media").content == kept
