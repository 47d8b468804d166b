"""Requests that cost the service more than their size says, against the live service (see
conftest.py): a query clip is bounded in bytes and length before it is decoded, and
thumbnails are bounded in number per video and in bytes on disk."""

from __future__ import annotations

import io

from PIL import Image

from tests.media import tiny_frames
from tests.serve.test_app import error


def test_a_query_clip_over_the_byte_cap_is_a_413_before_it_is_decoded(live):
    big = b"\x00\x00\x00\x18ftypmp42" + bytes(live.cfg.max_query_clip_bytes)
    r = live.client.post("/v1/search", files={"clip": ("q.mp4", big, "video/mp4")})
    assert "clip" in error(r, 413, "too_large")
    # far over it: refused while the body is read, not stored first
    r = live.client.post("/v1/search", files={"clip": ("q.mp4", big * 4, "video/mp4")})
    error(r, 413, "too_large")
    assert live.client.post("/v1/search", json={"text": "a cat", "top_k": 1}).status_code == 200


def test_a_query_clip_longer_than_the_cap_is_a_422_that_says_so(live, tmp_path):
    fps = 4
    tiny_frames(tmp_path / "long.mp4", int((live.cfg.max_query_clip_s + 1) * fps), fps)
    with open(tmp_path / "long.mp4", "rb") as f:
        r = live.client.post("/v1/search", files={"clip": ("long.mp4", f, "video/mp4")})
    assert f"{live.cfg.max_query_clip_s:g} s" in error(r, 422, "clip_too_long")


def _thumbs(live):
    return [p for p in (live.cfg.data_dir / "thumbs").rglob("*") if p.is_file()]


def test_a_thumbnail_past_the_end_is_a_404_and_caches_nothing(live):
    video_id = live.ids["launch.mp4"]
    duration = live.client.get(f"/v1/videos/{video_id}").json()["duration_s"]
    before = _thumbs(live)
    for t in (duration + 0.2, 10_000, 1e7):
        r = live.client.get(f"/v1/videos/{video_id}/thumbnail", params={"t": t})
        assert "past the end" in error(r, 404, "past_end")
    assert _thumbs(live) == before
    r = live.client.get(
        f"/v1/videos/{video_id}/thumbnail", params={"t": duration}
    )  # the last frame
    assert r.status_code == 200 and r.content[:3] == b"\xff\xd8\xff"


def test_many_distinct_thumbnails_stay_within_the_cache_byte_bound(live):
    bound = live.cfg.thumbnail_cache_bytes
    served = 0
    for name in ("kitchen.mp4", "street.mp4"):
        for tenth in range(0, 110, 3):
            r = live.client.get(f"/v1/videos/{live.ids[name]}/thumbnail", params={"t": tenth / 10})
            assert r.status_code == 200, r.text
            assert Image.open(io.BytesIO(r.content)).width == 320
            served += len(r.content)
            assert sum(p.stat().st_size for p in _thumbs(live)) <= bound
    assert served > 2 * bound  # the bound was reached and held
