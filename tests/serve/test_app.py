"""The REST contract over real HTTP against the live service (see conftest.py): every route,
every option, every error code."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
from PIL import Image

from tests.serve.conftest import MAX_UPLOAD
from vifusion.samples import frame_at, write_clip

ROUTES = [
    ("POST", "/v1/videos"),
    ("GET", "/v1/videos"),
    ("GET", "/v1/videos/1"),
    ("DELETE", "/v1/videos/1"),
    ("GET", "/v1/videos/1/thumbnail?t=1"),
    ("GET", "/v1/videos/1/media"),
    ("GET", "/v1/jobs/abc"),
    ("POST", "/v1/search"),
]


def error(r, status: int, code: str | None = None) -> str:
    """Assert an error response of the contract's shape; return its message."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    if code is not None:
        assert body["error"]["code"] == code, body
    assert body["error"]["message"]
    return body["error"]["message"]


def overlaps(result: dict, start_s: float, end_s: float) -> bool:
    return result["start_s"] < end_s and start_s < result["end_s"]


def jpeg(rgb: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


# -- auth and errors ---------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_v1_route_needs_the_key(live, method, path):
    error(live.anon.request(method, path), 401, "unauthorized")
    r = live.anon.request(method, path, headers={"Authorization": "Bearer wrong-key"})
    error(r, 401, "unauthorized")
    assert r.headers["www-authenticate"] == "Bearer"


def test_unknown_route_is_a_json_404(live):
    error(live.client.get("/v1/nothing-here"), 404)


def test_malformed_json_is_a_400(live):
    r = live.client.post(
        "/v1/search", content=b'{"text": "a cat",', headers={"content-type": "application/json"}
    )
    error(r, 400, "malformed_json")
    r = live.client.post(
        "/v1/videos", content=b"not json", headers={"content-type": "application/json"}
    )
    error(r, 400, "malformed_json")


def test_other_content_types_are_a_415(live):
    error(
        live.client.post("/v1/search", content=b"a cat", headers={"content-type": "text/plain"}),
        415,
    )


@pytest.mark.parametrize(
    "body",
    [
        {"text": "a cat", "video_id": 1, "start_s": 0, "end_s": 2},
        {"text": "a cat", "image_b64": "aGVsbG8="},
        {},
        {"top_k": 5},
    ],
    ids=["text+clip", "text+image", "empty", "options-only"],
)
def test_search_needs_exactly_one_query_kind(live, body):
    error(live.client.post("/v1/search", json=body), 422)


@pytest.mark.parametrize("top_k", [0, 10**6, -1])
def test_top_k_out_of_range_is_a_422(live, top_k):
    error(
        live.client.post("/v1/search", json={"text": "a cat", "top_k": top_k}),
        422,
        "invalid_request",
    )


@pytest.mark.parametrize(
    "body",
    [
        {"text": "a cat", "group_by": "scene"},
        {"text": ""},
        {"text": "a cat", "colour": "red"},
        {"text": "a cat", "filter": {"k": {"nested": 1}}},
        {"text": "a cat", "cursor": "garbage!"},
    ],
    ids=["bad-group", "empty-text", "unknown-field", "nested-filter", "bad-cursor"],
)
def test_bad_search_options_are_4xx(live, body):
    r = live.client.post("/v1/search", json=body)
    assert r.status_code in (400, 422), r.text
    error(r, r.status_code)


def test_image_b64_that_is_not_an_image_is_a_422(live):
    r = live.client.post(
        "/v1/search", json={"image_b64": base64.b64encode(b"hello, not an image").decode()}
    )
    error(r, 422, "invalid_image")
    error(
        live.client.post("/v1/search", json={"image_b64": "%%%not base64%%%"}), 422, "invalid_image"
    )


def test_zero_byte_upload_is_refused(live):
    r = live.client.post("/v1/videos", files={"file": ("empty.mp4", b"", "video/mp4")})
    error(r, 400, "empty_file")


def test_text_file_as_video_is_a_415(live):
    r = live.client.post(
        "/v1/videos", files={"file": ("notes.mp4", b"just some notes\n" * 50, "video/mp4")}
    )
    assert "text" in error(r, 415, "unsupported_media_type")


def test_an_image_uploaded_as_video_is_a_415(live):
    data = jpeg(np.zeros((16, 16, 3), np.uint8))
    error(live.client.post("/v1/videos", files={"file": ("photo.mp4", data, "video/mp4")}), 415)


def test_upload_over_the_size_limit_is_a_413(live):
    big = b"\x00\x00\x00\x18ftypmp42" + bytes(MAX_UPLOAD + 1024)
    r = live.client.post("/v1/videos", files={"file": ("big.mp4", big, "video/mp4")})
    error(r, 413, "too_large")


def test_huge_metadata_is_a_413(live):
    meta = {"k": "x" * (live.cfg.max_metadata_bytes + 10)}
    video = live.videos["launch.mp4"].path
    error(live.client.post("/v1/videos", json={"uri": video.as_uri(), "metadata": meta}), 413)
    with open(video, "rb") as f:
        r = live.client.post(
            "/v1/videos",
            files={"file": ("v.mp4", f, "video/mp4")},
            data={"metadata": json.dumps(meta)},
        )
    error(r, 413)


def test_metadata_must_be_a_json_object(live):
    with open(live.videos["launch.mp4"].path, "rb") as f:
        r = live.client.post(
            "/v1/videos", files={"file": ("v.mp4", f, "video/mp4")}, data={"metadata": "[1, 2"}
        )
    error(r, 400, "malformed_json")


@pytest.mark.parametrize(
    ("uri", "status", "code"),
    [
        ("file:///etc/passwd", 403, "forbidden_path"),
        ("file://{videos}/../../../etc/passwd", 403, "path_traversal"),
        ("file://{videos}/%2e%2e/%2e%2e/etc/passwd", 403, "path_traversal"),
        ("file://{videos}/missing.mp4", 404, "not_found"),
        ("http://127.0.0.1:8000/video.mp4", 403, "forbidden_address"),
        ("http://169.254.169.254/latest/meta-data/", 403, "forbidden_address"),
        ("http://localhost/video.mp4", 403, "forbidden_address"),
        ("http://[::1]/video.mp4", 403, "forbidden_address"),
        ("http://10.0.0.8/video.mp4", 403, "forbidden_address"),
        ("ftp://example.com/video.mp4", 400, "invalid_uri"),
        ("http://user:pw@example.com/v.mp4", 400, "invalid_uri"),
    ],
)
def test_dangerous_uris_are_refused(live, uri, status, code):
    uri = uri.format(videos=live.root / "videos")
    error(live.client.post("/v1/videos", json={"uri": uri}), status, code)


def test_symlink_out_of_the_ingest_root_is_refused(live, tmp_path):
    link = live.root / "videos" / "sneaky.mp4"
    outside = tmp_path / "secret.mp4"
    outside.write_bytes(live.videos["launch.mp4"].path.read_bytes())
    link.symlink_to(outside)
    try:
        error(live.client.post("/v1/videos", json={"uri": link.as_uri()}), 403, "forbidden_path")
    finally:
        link.unlink()


@pytest.mark.parametrize(
    "path", ["/v1/videos/999999", "/v1/videos/999999/thumbnail?t=1", "/v1/videos/999999/media"]
)
def test_unknown_video_is_a_404(live, path):
    error(live.client.get(path), 404, "not_found")


def test_unknown_video_delete_and_job_are_404(live):
    error(live.client.delete("/v1/videos/999999"), 404, "not_found")
    error(live.client.get("/v1/jobs/no-such-job"), 404, "not_found")
    error(live.client.get("/v1/videos/abc"), 422)
    error(live.client.get("/v1/videos/99999999999999999999"), 422)


def test_search_by_clip_of_an_unknown_video_is_a_404(live):
    error(live.client.post("/v1/search", json={"video_id": 999999, "start_s": 0, "end_s": 3}), 404)


# -- ingest and jobs -------------------------------------------------------------------


def test_a_corrupt_upload_fails_its_own_job_with_a_reason(live):
    data = bytes(range(256)) * 64  # binary, no known signature: only the decoder can tell
    r = live.client.post("/v1/videos", files={"file": ("noise.mkv", data, "video/x-matroska")})
    assert r.status_code == 202, r.text
    job = live.vf.wait(r.json()["job_id"])
    assert job["status"] == "failed"
    assert job["error"] and "noise" in job["error"], job
    video = live.client.get(f"/v1/videos/{r.json()['video_id']}").json()
    assert video["status"] == "failed"
    assert live.client.delete(f"/v1/videos/{r.json()['video_id']}").status_code == 204
    assert (
        live.anon.get("/healthz").json()["vectors"] == live.vectors
    )  # nothing of it, nothing lost


def test_jobs_of_the_ingested_videos_are_ready(live):
    for name, video_id in live.ids.items():
        v = live.client.get(f"/v1/videos/{video_id}").json()
        assert v["status"] == "ready" and v["frames_indexed"] == 12, (name, v)
        assert set(v) >= {
            "video_id",
            "title",
            "metadata",
            "status",
            "duration_s",
            "fps",
            "width",
            "height",
            "frames_indexed",
            "created_at",
        }
        assert v["metadata"]["set"] == "demo"
        assert v["duration_s"] == pytest.approx(live.videos[name].duration_s, abs=0.1)
        assert (v["width"], v["height"]) == (320, 240)
        assert v["created_at"].endswith("Z")


def test_video_list_pages_with_a_cursor(live):
    r = live.client.get("/v1/videos", params={"limit": 2})
    assert r.status_code == 200
    first = r.json()
    assert len(first["videos"]) == 2 and first["next_cursor"]
    rest = live.client.get(
        "/v1/videos", params={"limit": 500, "cursor": first["next_cursor"]}
    ).json()
    ids = [v["video_id"] for v in first["videos"] + rest["videos"]]
    assert ids == sorted(set(ids)) and set(live.ids.values()) <= set(ids)
    assert rest["next_cursor"] is None
    error(live.client.get("/v1/videos", params={"limit": 0}), 422)
    error(live.client.get("/v1/videos", params={"cursor": "x"}), 400, "invalid_cursor")


# -- search ----------------------------------------------------------------------------


def test_text_search_finds_the_cat_moment_with_a_thumbnail(live):
    r = live.client.post("/v1/search", json={"text": "a cat", "top_k": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    top = body["results"][0]
    cat = live.videos["kitchen.mp4"].scene_of("chelsea")
    assert top["video_id"] == live.ids["kitchen.mp4"] and overlaps(top, cat.start_s, cat.end_s)
    assert set(top) >= {"video_id", "start_s", "end_s", "score", "thumbnail_url"}
    assert len(body["results"]) <= 3 and body["took_ms"] >= 0
    assert (body["partial"], body["missing_shards"]) == (False, [])  # every shard answered
    thumb = live.client.get(top["thumbnail_url"])
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"
    assert Image.open(io.BytesIO(thumb.content)).width == 320


def test_image_search_as_base64_and_as_upload(live):
    launch = live.videos["launch.mp4"]
    image = jpeg(frame_at(launch.path, 6.0)[20:-20, 30:-10, :][:, ::-1])
    r = live.client.post(
        "/v1/search", json={"image_b64": base64.b64encode(image).decode(), "top_k": 3}
    )
    assert r.status_code == 200, r.text
    top = r.json()["results"][0]
    assert top["video_id"] == live.ids["launch.mp4"] and overlaps(top, 5.0, 7.0)
    r = live.client.post(
        "/v1/search", files={"image": ("q.jpg", image, "image/jpeg")}, data={"top_k": "2"}
    )
    assert r.status_code == 200, r.text
    assert (
        r.json()["results"][0]["video_id"] == live.ids["launch.mp4"]
        and len(r.json()["results"]) <= 2
    )


def test_clip_search_by_upload_and_by_indexed_range(live, tmp_path):
    street = live.videos["street.mp4"]
    clip = write_clip(street.path, tmp_path / "q.mp4", 4.5, 7.5, (192, 144))
    with open(clip, "rb") as f:
        r = live.client.post("/v1/search", files={"clip": ("q.mp4", f, "video/mp4")})
    assert r.status_code == 200, r.text
    top = r.json()["results"][0]
    assert top["video_id"] == live.ids["street.mp4"] and overlaps(top, 4.5, 7.5)
    r = live.client.post(
        "/v1/search", json={"video_id": live.ids["street.mp4"], "start_s": 4.0, "end_s": 7.0}
    )
    assert r.status_code == 200, r.text
    top = r.json()["results"][0]
    assert top["video_id"] == live.ids["street.mp4"] and overlaps(top, 4.0, 7.0)


def test_a_corrupt_clip_is_a_422(live):
    r = live.client.post(
        "/v1/search",
        files={"clip": ("q.mp4", b"\x00\x00\x00\x18ftypmp42" + bytes(500), "video/mp4")},
    )
    error(r, 422, "invalid_clip")


def test_group_by_video_and_frame(live):
    # visual only keeps its cosines, so every video and frame is listed, however weak (fused
    # text search leaves out what no list found related)
    everything = {"min_relative_score": 0, "modalities": ["visual"]}
    by_video = live.client.post(
        "/v1/search", json={"text": "a cat", "group_by": "video", **everything}
    ).json()["results"]
    ids = [m["video_id"] for m in by_video]
    assert len(ids) == len(set(ids)) == 3 and ids[0] == live.ids["kitchen.mp4"]
    frames = live.client.post(
        "/v1/search", json={"text": "a cat", "group_by": "frame", "top_k": 20, **everything}
    ).json()["results"]
    assert len(frames) == 20
    # each a distinct sampled frame, standing from its own timestamp to the next sampled
    # frame's (about the 1-s interval, or several when near-duplicates were merged)
    assert len({(m["video_id"], m["start_s"]) for m in frames}) == 20
    spans = [m["end_s"] - m["start_s"] for m in frames]
    assert all(0 < s <= 60 for s in spans), spans
    assert [m["score"] for m in frames] == sorted((m["score"] for m in frames), reverse=True)


def test_metadata_filter_keeps_only_matching_videos(live):
    body = {
        "text": "a rocket",
        "group_by": "video",
        "filter": {"upload": True},
        "min_relative_score": 0,
    }
    ids = {m["video_id"] for m in live.client.post("/v1/search", json=body).json()["results"]}
    assert ids == {live.ids["kitchen.mp4"], live.ids["street.mp4"]}
    body["filter"] = {"set": "demo", "upload": False}
    ids = {m["video_id"] for m in live.client.post("/v1/search", json=body).json()["results"]}
    assert ids == {live.ids["launch.mp4"]}
    body["filter"] = {"set": "other"}
    assert live.client.post("/v1/search", json=body).json()["results"] == []


def test_min_score_drops_weaker_moments(live):
    query = {
        "text": "a cat",
        "top_k": 20,
        "min_relative_score": 0,
        "modalities": ["visual"],
    }  # raw cosines: many
    everything = live.client.post("/v1/search", json=query).json()["results"]
    floor = sorted({m["score"] for m in everything})[-2]
    strong = live.client.post("/v1/search", json={**query, "min_score": floor}).json()["results"]
    assert strong and all(m["score"] >= floor for m in strong) and len(strong) < len(everything)


def test_min_relative_score_drops_the_weak_tail_unless_a_request_says_0(live):
    image = jpeg(frame_at(live.videos["launch.mp4"].path, 6.0))
    for ask in (
        lambda extra: live.client.post("/v1/search", json={"text": "a cat", "top_k": 20, **extra}),
        lambda extra: live.client.post(
            "/v1/search",
            files={"image": ("q.jpg", image, "image/jpeg")},
            data={"top_k": "20", **{k: str(v) for k, v in extra.items()}},
        ),
    ):
        everything = ask({"min_relative_score": 0}).json()["results"]
        best = everything[0]["score"]
        cut = ask({}).json()["results"]  # the service's default
        assert cut[0] == everything[0] and len(cut) < len(everything)
        assert [m["score"] for m in cut] == [
            m["score"] for m in everything if m["score"] >= live.cfg.min_relative_score * best
        ]
    error(
        live.client.post("/v1/search", json={"text": "a cat", "min_relative_score": 1.5}),
        422,
        "invalid_request",
    )


def test_cursor_pages_through_results_without_repeats(live):
    query = {
        "text": "a cat",
        "min_relative_score": 0,
        "modalities": ["visual"],
    }  # a long list, weak moments too
    first = live.client.post("/v1/search", json={**query, "top_k": 3}).json()
    assert first["next_cursor"]
    second = live.client.post(
        "/v1/search", json={**query, "top_k": 3, "cursor": first["next_cursor"]}
    ).json()
    whole = live.client.post("/v1/search", json={**query, "top_k": 6}).json()
    key = lambda m: (m["video_id"], m["start_s"], m["end_s"])  # noqa: E731
    assert [key(m) for m in first["results"] + second["results"]] == [
        key(m) for m in whole["results"]
    ]


# -- delete, media, metrics, rate limit -----------------------------------------------


def test_delete_removes_a_video_from_every_later_search(live):
    with open(live.videos["kitchen.mp4"].path, "rb") as f:
        r = live.client.post(
            "/v1/videos", files={"file": ("copy.mp4", f, "video/mp4")}, data={"title": "cat copy"}
        )
    video_id = r.json()["video_id"]
    assert live.vf.wait(r.json()["job_id"])["status"] == "ready"
    found = {
        m["video_id"]
        for m in live.client.post("/v1/search", json={"text": "a cat", "group_by": "video"}).json()[
            "results"
        ]
    }
    assert video_id in found
    assert live.client.delete(f"/v1/videos/{video_id}").status_code == 204
    error(live.client.get(f"/v1/videos/{video_id}"), 404)
    for body in (
        {"text": "a cat", "group_by": "video", "top_k": 100},
        {"text": "a cat", "group_by": "frame", "top_k": 100},
    ):
        assert video_id not in {
            m["video_id"] for m in live.client.post("/v1/search", json=body).json()["results"]
        }
    assert live.anon.get("/healthz").json()["vectors"] == live.vectors
    error(live.client.delete(f"/v1/videos/{video_id}"), 404)


def test_media_supports_byte_ranges(live):
    video_id = live.ids["kitchen.mp4"]
    whole = live.client.get(f"/v1/videos/{video_id}/media")
    assert (
        whole.status_code == 200 and whole.content == live.videos["kitchen.mp4"].path.read_bytes()
    )
    part = live.client.get(f"/v1/videos/{video_id}/media", headers={"Range": "bytes=100-199"})
    assert part.status_code == 206 and part.content == whole.content[100:200]
    assert part.headers["content-range"] == f"bytes 100-199/{len(whole.content)}"


def test_thumbnail_time_outside_the_video_is_a_4xx(live):
    error(
        live.client.get(f"/v1/videos/{live.ids['launch.mp4']}/thumbnail", params={"t": 10_000}),
        404,
        "past_end",
    )
    error(live.client.get(f"/v1/videos/{live.ids['launch.mp4']}/thumbnail", params={"t": -1}), 422)


def test_metrics_are_prometheus_text(live):
    live.client.post("/v1/search", json={"text": "a cat"})
    r = live.anon.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    for name in (
        "vifusion_http_requests_total",
        "vifusion_http_request_seconds_bucket",
        "vifusion_shard_vectors",
        "vifusion_ingest_frames_per_second",
        "vifusion_fusion_batches",
        "vifusion_codec_bytes",
        "vifusion_search_seconds_count",
    ):
        assert name in text, name
    # No plan applied on this data dir: none in force, none made again.
    assert "vifusion_replans_total 0.0" in text
    assert "vifusion_plan_predicted_frames_per_second 0.0" in text
    assert "vifusion_extractors 1.0" in text  # num_extractors: no plan places others
    assert 'vifusion_http_requests_total{method="POST",route="/v1/search",status="200"}' in text
    vectors = sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("vifusion_shard_vectors{") and 'space="visual"' in line
    )
    assert vectors == live.vectors


def _series(text: str, name: str) -> dict[frozenset, float]:
    """``name``'s samples in Prometheus text, by their labels (``_labels``)."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) + 1 :].rsplit("} ", 1)
            out[frozenset(tuple(p.split("=", 1)) for p in labels.replace('"', "").split(","))] = (
                float(value)
            )
    return out


def _labels(**labels: str) -> frozenset:
    return frozenset(labels.items())


def test_metrics_show_each_link_from_its_own_measurements(live):
    text = live.anon.get("/metrics").text
    held = {dict(k)["shard"] for k, n in _series(text, "vifusion_shard_vectors").items() if n}
    links = [dict(k) for k in _series(text, "vifusion_link_min_rtt_seconds")]
    assert {
        link["shard"] for link in links
    } >= held  # every shard that holds frames was reached by a measured link
    for link in links:
        at = _labels(**link)
        assert 0 < _series(text, "vifusion_link_min_rtt_seconds")[at] < 1, link
        assert _series(text, "vifusion_link_capacity_bytes_per_second")[at] > 0
        assert _series(text, "vifusion_link_batch_bytes")[at] > 0
        assert _series(text, "vifusion_link_window_messages")[at] >= 1
        assert _series(text, "vifusion_link_codec_level")[at] == 0
    # batches to the shards go on their streams (a link's first batch by actor call, while
    # the shard's address is on its way)
    assert any(_series(text, "vifusion_link_by_stream")[_labels(**link)] == 1 for link in links)
    # Loopback is never congested: every link sends exact fp32.
    assert _series(text, "vifusion_link_codec") == {
        _labels(**link, codec="fp32"): 1.0 for link in links
    }
    for name in (
        "delivery_rate_bytes_per_second",
        "queueing_delay_seconds",
        "backlog_age_seconds",
        "in_flight_messages",
        "receiver_share",
        "per_message_seconds",
    ):
        assert len(_series(text, f"vifusion_link_{name}")) == len(links), name


def test_the_ingest_pool_reads_each_link_it_follows_for_re_planning(live):
    """What the pool's plan follower reads each round (vifusion/plan/follow.py): each node
    aggregator's links with their measured capacity, and each shard primary's node."""
    import ray

    from vifusion.cluster.actors import actor_name, find_actor

    pool = find_actor(actor_name(live.cfg, "ingest"))
    fusion, primaries = ray.get(pool.link_readings.remote())
    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(primaries) == live.cfg.num_shards and set(primaries) <= nodes
    assert fusion and {a["node"] for a in fusion} <= nodes
    links = [link for a in fusion for link in a["links"].values()]
    assert links and all(link["capacity"] > 0 for link in links)


def test_openapi_documents_the_contract(live):
    spec = live.anon.get("/openapi.json").json()
    paths = spec["paths"]
    assert {
        "/v1/videos",
        "/v1/videos/{video_id}",
        "/v1/jobs/{job_id}",
        "/v1/search",
        "/healthz",
        "/metrics",
    } <= set(paths)
    assert set(paths["/v1/search"]["post"]["requestBody"]["content"]) == {
        "application/json",
        "multipart/form-data",
    }
