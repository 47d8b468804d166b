"""Hostile clients against the running service (the session's Serve app): each is refused
or made harmless, and the service goes on answering everyone else."""

from __future__ import annotations

import io
import json
import socket
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import httpx
import pytest
from PIL import Image

from tests.media import huge_frame, tiny_frames, zero_timescale
from tests.serve.test_app import error


def test_a_decompression_bomb_image_is_a_413_before_it_is_decoded(live):
    # 30000 x 30000 black pixels: a few hundred kB of PNG, 2.7 GB once decoded as RGB
    buf = io.BytesIO()
    Image.new("1", (30000, 30000)).save(buf, format="PNG")
    assert len(buf.getvalue()) < 1 << 20
    r = live.client.post("/v1/search", files={"image": ("bomb.png", buf.getvalue(), "image/png")})
    assert "pixel limit" in error(r, 413, "too_large")
    assert live.client.post("/v1/search", json={"text": "a cat"}).status_code == 200


@pytest.mark.slow
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
    body_head = (
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="slow.mp4"\r\n'
        b"Content-Type: video/mp4\r\n\r\n\x00\x00\x00\x18ftypmp42"
    )
    slow = socket.create_connection((url.hostname, url.port))
    slow.sendall(
        b"POST /v1/videos HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + live.cfg.api_key.encode()
        + b"\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 5000000\r\n\r\n"
        + body_head
    )
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
        codes = [
            live.client.post("/v1/search", json={"text": "a rocket", "top_k": 1}).status_code
            for _ in range(5)
        ]
        assert codes == [200] * 5
    finally:
        stop.set()
        t.join()
        slow.close()
    time.sleep(1)
    after = live.client.get("/v1/videos", params={"limit": 500}).json()["videos"]
    assert [v["video_id"] for v in after] == [v["video_id"] for v in before]


def test_hostile_media_fail_their_own_jobs_with_reasons_and_odd_but_real_video_is_indexed(
    live, tmp_path
):
    """Uploads that pass the quick sniff but are broken inside fail their own jobs, each
    with its reason; a real video with an extreme frame count in an unexpected container
    is indexed within the frame cap. The rest of the index is untouched."""
    zero_timescale(live.videos["kitchen.mp4"].path, tmp_path / "zero-fps.mp4")
    huge_frame(tmp_path / "huge.mp4")
    tiny_frames(
        tmp_path / "many.mp4", 20_000, 1000, container="matroska"
    )  # 20 s, an mkv named .mp4
    reasons = {"zero-fps.mp4": "frame rate", "huge.mp4": "over the limit", "many.mp4": None}
    jobs = {}
    for name in reasons:
        r = live.client.post(
            "/v1/videos", files={"file": (name, (tmp_path / name).read_bytes(), "video/mp4")}
        )
        assert r.status_code == 202, r.text
        jobs[name] = r.json()
    for name, reason in reasons.items():
        job = live.vf.wait(jobs[name]["job_id"])
        if reason is None:
            assert job["status"] == "ready" and job["frames_indexed"] >= 1, job
        else:
            assert job["status"] == "failed" and name in job["error"] and reason in job["error"], (
                job
            )
    many = live.client.get(f"/v1/videos/{jobs['many.mp4']['video_id']}").json()
    assert many["fps"] == 1000 and many["duration_s"] == 20
    for ingested in jobs.values():
        assert live.client.delete(f"/v1/videos/{ingested['video_id']}").status_code == 204
    assert live.anon.get("/healthz").json()["vectors"] == live.vectors
    r = live.client.post("/v1/search", json={"text": "a cat", "top_k": 1})
    assert r.json()["results"][0]["video_id"] == live.ids["kitchen.mp4"]


# -- inputs that used to be a 500 -----------------------------------------------------------


def _nested_object(depth: int) -> dict:
    doc: dict = {}
    inner = doc
    for _ in range(depth - 1):
        inner["a"] = {}
        inner = inner["a"]
    inner["a"] = 1
    return doc


def test_metadata_nested_past_the_depth_cap_is_refused_at_ingest(live):
    """300 levels were stored with a 202 and then made every listing that showed them a 500."""
    deep = _nested_object(300)
    uri = live.videos["launch.mp4"].path.as_uri()
    assert "deep" in error(
        live.client.post("/v1/videos", json={"uri": uri, "metadata": deep}),
        422,
        "metadata_too_deep",
    )
    r = live.client.post(
        "/v1/videos",
        files={"file": ("v.mkv", b"\x1a\x45\xdf\xa3" + bytes(64), "video/x-matroska")},
        data={"metadata": json.dumps(deep)},
    )
    error(r, 422, "metadata_too_deep")
    many = {f"k{i}": i for i in range(live.cfg.max_metadata_keys + 1)}
    error(
        live.client.post("/v1/videos", json={"uri": uri, "metadata": many}),
        422,
        "metadata_too_many_keys",
    )
    assert live.client.get("/v1/videos", params={"limit": 500}).status_code == 200


def test_a_listing_shows_what_is_stored_even_metadata_from_before_the_cap(live):
    """Metadata stored before the checks existed still lists: its keys too deep or with a
    lone surrogate are left out of the answer, the rest is shown."""
    stored = {"set": "old", "deep": _nested_object(300), "odd": ["x\udc00"]}
    with sqlite3.connect(live.cfg.data_dir / "catalog.db", timeout=30) as db:
        video_id = db.execute(
            "INSERT INTO videos (source, title, metadata, status, created_at) VALUES (?, ?, ?, 'failed', ?)",
            ("old:deep", "old deep", json.dumps(stored), time.time()),
        ).lastrowid
    try:
        r = live.client.get("/v1/videos", params={"limit": 500})
        assert r.status_code == 200, r.text[:300]
        listed = {v["video_id"]: v for v in r.json()["videos"]}
        assert listed[video_id]["metadata"] == {"set": "old"}
        r = live.client.get(f"/v1/videos/{video_id}")
        assert r.status_code == 200 and r.json()["metadata"] == {"set": "old"}, r.text[:300]
    finally:
        assert live.client.delete(f"/v1/videos/{video_id}").status_code == 204


def test_metadata_stored_with_nan_before_the_check_does_not_break_filtered_searches(live):
    """SQLite's JSON functions refuse NaN: one such video made every filtered search a 500."""
    with sqlite3.connect(live.cfg.data_dir / "catalog.db", timeout=30) as db:
        video_id = db.execute(
            "INSERT INTO videos (source, title, metadata, status, created_at) VALUES (?, ?, ?, 'ready', ?)",
            ("old:nan", "old nan", '{"set": "demo", "n": NaN}', time.time()),
        ).lastrowid
    try:
        r = live.client.post("/v1/search", json={"text": "a cat", "filter": {"set": "demo"}})
        assert r.status_code == 200, r.text[:300]
        assert {m["video_id"] for m in r.json()["results"]} <= set(live.ids.values())
        assert live.client.get(f"/v1/videos/{video_id}").json()["metadata"] == {
            "set": "demo",
            "n": None,
        }
    finally:
        assert live.client.delete(f"/v1/videos/{video_id}").status_code == 204


_NOT_QUITE_JSON = [
    "1" * 5000,
    "NaN",
    "-Infinity",
]  # Python reads them: past its 4300-digit int limit, not JSON


@pytest.mark.parametrize("value", _NOT_QUITE_JSON)
def test_json_that_python_reads_but_the_service_cannot_use_is_a_400(live, value):
    for doc in (
        '{"text": "a cat", "top_k": %s}',
        '{"text": "a cat", "min_score": %s}',
        '{"text": "a cat", "filter": {"n": %s}}',
    ):
        r = live.client.post(
            "/v1/search", content=doc % value, headers={"content-type": "application/json"}
        )
        assert "JSON" in error(r, 400, "malformed_json")
    uri = live.videos["launch.mp4"].path.as_uri()
    body = '{"uri": "%s", "metadata": {"n": %s}}' % (uri, value)
    error(
        live.client.post("/v1/videos", content=body, headers={"content-type": "application/json"}),
        400,
        "malformed_json",
    )
    form = {"metadata": '{"n": %s}' % value}
    r = live.client.post(
        "/v1/videos", files={"file": ("v.mkv", b"\x1a\x45\xdf\xa3" + bytes(64))}, data=form
    )
    error(r, 400, "malformed_json")


def test_text_with_a_lone_surrogate_is_a_422(live):
    """JSON can spell a lone UTF-16 surrogate (\\ud800); no UTF-8 text holds one, so SQLite
    cannot store it and a listing could not send it back."""
    uri = live.videos["launch.mp4"].path.as_uri()
    for body, code in (('{"text": "a cat\\ud800"}', "invalid_request"),):
        r = live.client.post(
            "/v1/search", content=body, headers={"content-type": "application/json"}
        )
        error(r, 422, code)
    for body, code in (
        ('{"uri": "%s", "title": "x\\udc00"}' % uri, "invalid_request"),
        ('{"uri": "%s", "metadata": {"a": ["x\\udc00"]}}' % uri, "invalid_metadata"),
        ('{"uri": "%s", "metadata": {"\\ud800": 1}}' % uri, "invalid_metadata"),
    ):
        r = live.client.post(
            "/v1/videos", content=body, headers={"content-type": "application/json"}
        )
        error(r, 422, code)


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 10**30])
def test_a_filter_value_past_int64_is_a_4xx_naming_the_key(live, value):
    r = live.client.post("/v1/search", json={"text": "a cat", "filter": {"count": value}})
    assert "count" in error(r, 422)
    r = live.client.post(
        "/v1/search", files={"clip": ("c.mp4", b"x")}, data={"filter": json.dumps({"count": value})}
    )
    assert "count" in error(r, 422)
    r = live.client.post("/v1/search", json={"text": "a cat", "filter": {"count": 2**63 - 1}})
    assert r.status_code == 200, r.text


def test_an_upload_named_in_100_cjk_characters_is_stored_under_a_name_that_fits_and_indexed(live):
    """300 bytes of UTF-8, over the 255-byte limit on a file name (ENAMETOOLONG, a 500):
    the stored file's name is cut to fit, keeping its extension; the title keeps the name."""
    stem = "視頻" * 50
    with open(live.videos["kitchen.mp4"].path, "rb") as f:
        r = live.client.post("/v1/videos", files={"file": (stem + ".mp4", f, "video/mp4")})
    assert r.status_code == 202, r.text
    video_id = r.json()["video_id"]
    try:
        assert live.vf.wait(r.json()["job_id"])["status"] == "ready"
        assert live.client.get(f"/v1/videos/{video_id}").json()["title"] == stem
        stored = [p for p in (live.cfg.data_dir / "media").glob("*/*") if p.name.startswith("視頻")]
        assert (
            len(stored) == 1 and stored[0].suffix == ".mp4" and len(stored[0].name.encode()) <= 255
        )
    finally:
        assert live.client.delete(f"/v1/videos/{video_id}").status_code == 204
    assert live.anon.get("/healthz").json()["vectors"] == live.vectors


@pytest.mark.parametrize(
    "uri", ["http://[", "https://[::1/v.mp4", "file://[/v.mp4", "http://a]/v.mp4"]
)
def test_a_uri_python_cannot_split_is_a_400(live, uri):
    error(live.client.post("/v1/videos", json={"uri": uri}), 400, "invalid_uri")


def _upload(live, filename: bytes, **fields: bytes) -> httpx.Response:
    """A multipart upload written byte by byte: a client may put any byte in a file name."""
    parts = [
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="%s"\r\n'
        b"Content-Type: video/x-matroska\r\n\r\n\x1a\x45\xdf\xa3" % filename + bytes(64) + b"\r\n"
    ]
    for name, value in fields.items():
        parts.append(b'--b\r\nContent-Disposition: form-data; name="%s"\r\n\r\n' % name.encode())
        parts.append(value + b"\r\n")
    return live.client.post(
        "/v1/videos",
        content=b"".join(parts) + b"--b--\r\n",
        headers={"content-type": "multipart/form-data; boundary=b"},
    )


def test_a_nul_in_any_text_is_a_422_naming_the_field_and_nothing_is_stored(live):
    """PostgreSQL's text refuses a NUL (the ingest failed) and its jsonb a stored one (every
    filtered search failed); SQLite kept them. Refused on every text field, on every catalog."""
    before = live.client.get("/v1/videos", params={"limit": 500}).json()["videos"]
    uri = live.videos["launch.mp4"].path.as_uri()
    for body, message in (
        ({"uri": uri, "title": "launch\x00"}, "title: contains a NUL character"),
        ({"uri": uri, "title": "\x1b[2J"}, "title: contains a control character (U+001B)"),
        (
            {"uri": uri, "metadata": {"a": {"b": ["x", "y\x00"]}}},
            "metadata.a.b[1]: contains a NUL character",
        ),
        ({"uri": uri, "metadata": {"k\x00": 1}}, "metadata.k\\x00 (its key): contains a NUL"),
        ({"uri": "https://example.com/a\x00.mp4"}, "uri: contains a NUL character"),
    ):
        r = live.client.post("/v1/videos", json=body)
        assert error(r, 422, "invalid_text").startswith(message), body
    for r, message in (
        (_upload(live, b"a\x00.mkv"), "file name: contains a NUL character"),
        (_upload(live, b"a.mkv", title=b"t\x00"), "title: contains a NUL character"),
        (_upload(live, b"a.mkv", metadata=b'{"a": "\\u0000"}'), "metadata.a: contains a NUL"),
    ):
        assert error(r, 422, "invalid_text").startswith(message)
    assert live.client.get("/v1/videos", params={"limit": 500}).json()["videos"] == before

    for body, message in (
        ({"text": "budget\x00"}, "text query: contains a NUL character"),
        (
            {"text": "a cat", "filter": {"set": "demo\x00"}},
            "metadata filter 'set': contains a NUL character",
        ),
        ({"text": "a cat", "filter": {"set\x00": "demo"}}, "metadata key 'set\\x00'"),
    ):
        r = live.client.post("/v1/search", json=body)
        assert error(r, 422, "invalid_query").startswith(message), body
    r = live.client.post(
        "/v1/search",
        content=b'--b\r\nContent-Disposition: form-data; name="text"\r\n\r\na\x00\r\n--b--\r\n',
        headers={"content-type": "multipart/form-data; boundary=b"},
    )
    assert error(r, 422, "invalid_query").startswith("text query: contains a NUL")
    assert live.client.post("/v1/search", json={"text": "a cat"}).status_code == 200
