"""Hostile clients against the running service (the session's Serve app): each is refused
or made harmless, and the service goes on answering everyone else."""

from __future__ import annotations

import io
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import httpx
from PIL import Image

from tests.media import huge_frame, tiny_frames, zero_timescale
from tests.serve.conftest import wait_ready
from tests.serve.test_app import error


def test_a_decompression_bomb_image_is_a_413_before_it_is_decoded(live):
    # 30000 x 30000 black pixels: a few hundred kB of PNG, 2.7 GB once decoded as RGB
    buf = io.BytesIO()
    Image.new("1", (30000, 30000)).save(buf, format="PNG")
    assert len(buf.getvalue()) < 1 << 20
    r = live.client.post("/v1/search", files={"image": ("bomb.png", buf.getvalue(), "image/png")})
    assert "pixel limit" in error(r, 413, "too_large")
    assert live.client.post("/v1/search", json={"text": "a cat"}).status_code == 200


def test_a_thousand_requests_without_a_key_are_all_401_and_keyed_ones_still_answer(live):
    def anonymous(_: int) -> int:
        with httpx.Client(base_url=live.url, timeout=60) as c:
            return c.get("/v1/videos").status_code

    with ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(anonymous, range(1000)))
    assert set(codes) == {401}
    r = live.client.post("/v1/search", json={"text": "a cat", "top_k": 1})
    assert r.status_code == 200 and r.json()["results"]


def test_a_slow_upload_holds_up_nobody_and_leaves_nothing_behind(live):
    """A client that declares 5 MB and trickles a few bytes at a time: searches and other
    requests go on; when it gives up, no video or job is left of it."""
    before = live.client.get("/v1/videos", params={"limit": 500}).json()["videos"]
    url = urlparse(live.url)
    body_head = (b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"slow.mp4\"\r\n"
                 b"Content-Type: video/mp4\r\n\r\n\x00\x00\x00\x18ftypmp42")
    slow = socket.create_connection((url.hostname, url.port))
    slow.sendall(b"POST /v1/videos HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + live.cfg.api_key.encode()
                 + b"\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 5000000\r\n\r\n" + body_head)
    stop = threading.Event()

    def trickle() -> None:
        while not stop.is_set():
            try:
                slow.sendall(b"\x00" * 64)
            except OSError:
                return
            time.sleep(0.1)

    t = threading.Thread(target=trickle)
    t.start()
    try:
        # while the upload crawls, others are served
        codes = [live.client.post("/v1/search", json={"text": "a rocket", "top_k": 1}).status_code for _ in range(5)]
        assert codes == [200] * 5
    finally:
        stop.set()
        t.join()
        slow.close()
    time.sleep(1)
    after = live.client.get("/v1/videos", params={"limit": 500}).json()["videos"]
    assert [v["video_id"] for v in after] == [v["video_id"] for v in before]


def test_hostile_media_fail_their_own_jobs_with_reasons_and_odd_but_real_video_is_indexed(live, tmp_path):
    """Uploads that pass the quick sniff but are broken inside fail their own jobs, each
    with its reason; a real video with an extreme frame count in an unexpected container
    is indexed within the frame cap. The rest of the index is untouched."""
    zero_timescale(live.videos["kitchen.mp4"].path, tmp_path / "zero-fps.mp4")
    huge_frame(tmp_path / "huge.mp4")
    tiny_frames(tmp_path / "many.mp4", 20_000, 1000, container="matroska")  # 20 s, an mkv named .mp4
    reasons = {"zero-fps.mp4": "frame rate", "huge.mp4": "over the limit", "many.mp4": None}
    jobs = {}
    for name in reasons:
        r = live.client.post("/v1/videos", files={"file": (name, (tmp_path / name).read_bytes(), "video/mp4")})
        assert r.status_code == 202, r.text
        jobs[name] = r.json()
    for name, reason in reasons.items():
        job = wait_ready(live.client, jobs[name]["job_id"])
        if reason is None:
            assert job["status"] == "ready" and job["frames_indexed"] >= 1, job
        else:
            assert job["status"] == "failed" and name in job["error"] and reason in job["error"], job
    many = live.client.get(f"/v1/videos/{jobs['many.mp4']['video_id']}").json()
    assert many["fps"] == 1000 and many["duration_s"] == 20
    for ingested in jobs.values():
        assert live.client.delete(f"/v1/videos/{ingested['video_id']}").status_code == 204
    assert live.anon.get("/healthz").json()["vectors"] == live.vectors
    r = live.client.post("/v1/search", json={"text": "a cat", "top_k": 1})
    assert r.json()["results"][0]["video_id"] == live.ids["kitchen.mp4"]
