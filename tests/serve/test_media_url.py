"""Playback by signed media URL: ``POST /v1/videos/{id}/media-url`` (with the key) gives a
``/media/{id}?exp&sig`` URL that a ``<video src>`` can fetch without the key, byte ranges and
all, until it expires, for that video only. ``/v1/videos/{id}/media`` serves ranges too."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlsplit

import pytest

from serve._auth import Gate
from serve._signed import MediaSigner
from tests.serve.conftest import KEY
from tests.serve.test_app import error
from vifusion.config import Config


def signed(live, video_id: int) -> str:
    r = live.client.post(f"/v1/videos/{video_id}/media-url")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["url"].startswith(f"/media/{video_id}?")
    assert 0 < body["expires_in_s"] <= live.cfg.media_url_ttl_s
    assert KEY not in body["url"]
    return body["url"]


def test_a_signed_url_plays_without_the_key_and_serves_byte_ranges(live):
    vid = live.ids["kitchen.mp4"]
    data = live.videos["kitchen.mp4"].path.read_bytes()
    url = signed(live, vid)

    whole = live.anon.get(url)
    assert whole.status_code == 200 and whole.content == data
    assert whole.headers["accept-ranges"] == "bytes"
    assert whole.headers["content-type"] == "video/mp4"

    part = live.anon.get(url, headers={"Range": "bytes=100-1099"})
    assert part.status_code == 206
    assert part.content == data[100:1100]
    assert part.headers["content-range"] == f"bytes 100-1099/{len(data)}"

    tail = live.anon.get(
        url, headers={"Range": "bytes=-500"}
    )  # the last 500 bytes, as a player reads an index
    assert tail.status_code == 206 and tail.content == data[-500:]

    r = live.anon.get(url, headers={"Range": f"bytes={len(data) + 10}-"})
    error(r, 416, "range_not_satisfiable")
    assert r.headers["content-range"] == f"bytes */{len(data)}"
    error(live.anon.get(url, headers={"Range": "lines=1-2"}), 400, "bad_range")


def test_the_keyed_media_route_serves_byte_ranges_too(live):
    vid = live.ids["street.mp4"]
    data = live.videos["street.mp4"].path.read_bytes()
    part = live.client.get(f"/v1/videos/{vid}/media", headers={"Range": "bytes=0-99"})
    assert part.status_code == 206 and part.content == data[:100]
    assert part.headers["content-range"] == f"bytes 0-99/{len(data)}"
    error(live.client.get(f"/v1/videos/{vid}/media", headers={"Range": f"bytes={len(data)}-"}), 416)


def test_minting_a_url_needs_the_key(live):
    vid = live.ids["kitchen.mp4"]
    error(live.anon.post(f"/v1/videos/{vid}/media-url"), 401, "unauthorized")
    error(
        live.anon.post(f"/v1/videos/{vid}/media-url", headers={"Authorization": "Bearer wrong"}),
        401,
    )
    error(live.client.post("/v1/videos/999999/media-url"), 404, "not_found")


def test_an_expired_url_is_refused(live):
    vid = live.ids["kitchen.mp4"]
    url, exp = MediaSigner(KEY, 60).url(
        vid, now=time.time() - 120
    )  # signed as the service signs, 1 min ago
    assert exp < time.time()
    message = error(live.anon.get(url), 403, "expired")
    assert "media-url" in message


def tampered(url: str, **change: str) -> str:
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()} | change
    return parts.path + "?" + "&".join(f"{k}={v}" for k, v in query.items())


def test_a_tampered_or_missing_signature_is_refused(live):
    vid = live.ids["kitchen.mp4"]
    url = signed(live, vid)
    sig = parse_qs(urlsplit(url).query)["sig"][0]
    exp = int(parse_qs(urlsplit(url).query)["exp"][0])
    flipped = ("A" if sig[0] != "A" else "B") + sig[1:]
    error(live.anon.get(tampered(url, sig=flipped)), 403, "bad_signature")
    error(
        live.anon.get(tampered(url, exp=str(exp + 3600))), 403, "bad_signature"
    )  # a longer life is not signed
    error(live.anon.get(f"/media/{vid}"), 403, "bad_signature")
    error(live.anon.get(f"/media/{vid}?exp={exp}"), 403, "bad_signature")
    error(live.anon.get(tampered(url, exp="-5")), 403, "bad_signature")
    # a URL signed under another key (an old key, rotated out) opens nothing
    other, _ = MediaSigner("another-key-0123456789abcdefghijklmnop", 60).url(vid)
    error(live.anon.get(other), 403, "bad_signature")


def test_the_signature_of_one_video_does_not_open_another(live):
    a, b = live.ids["kitchen.mp4"], live.ids["street.mp4"]
    url = signed(live, a)
    error(live.anon.get(url.replace(f"/media/{a}?", f"/media/{b}?", 1)), 403, "bad_signature")


@pytest.mark.parametrize(
    "path",
    [
        "/media/..%2F..%2Fetc%2Fpasswd",
        "/media/%2E%2E/v1/videos",
        "/media/1%2F..%2F2",
        "/media/-1",
        "/media/0",
        "/media/1.5",
        "/media/%00",
    ],
)
def test_the_id_cannot_name_a_path(live, path):
    url = signed(live, live.ids["kitchen.mp4"])
    r = live.anon.get(path + "?" + urlsplit(url).query)
    assert r.status_code in (403, 404, 422), r.text
    assert r.headers["content-type"].startswith("application/json"), r.headers
    assert b"root:" not in r.content


def test_a_deleted_video_is_a_404_even_with_a_valid_url(live):
    with open(live.videos["street.mp4"].path, "rb") as f:
        r = live.client.post("/v1/videos", files={"file": ("gone.mp4", f, "video/mp4")})
    assert r.status_code == 202, r.text
    vid = r.json()["video_id"]
    assert live.vf.wait(r.json()["job_id"])["status"] == "ready"  # played once decoded as a video
    url = signed(live, vid)
    assert live.anon.get(url, headers={"Range": "bytes=0-9"}).status_code == 206
    assert live.client.delete(f"/v1/videos/{vid}").status_code == 204
    error(live.anon.get(url), 404, "not_found")


def media_gate() -> Gate:
    g = Gate()
    g.configure(
        KEY,
        Config(
            rate_limit_media_rps=0.01,
            rate_limit_media_burst=2,
            rate_limit_rps=0.01,
            rate_limit_burst=5,
        ),
    )
    return g


def query(url: str) -> tuple[str, bytes]:
    parts = urlsplit(url)
    return parts.path, parts.query.encode()


def test_signed_urls_draw_on_a_media_budget_of_their_own():
    g = media_gate()
    url, _ = g.signer.url(7)
    assert [g.check_signed(*query(url), "10.0.0.1") for _ in range(2)] == [None, None]
    limited = g.check_signed(*query(url), "10.0.0.1")
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
    assert g.check_signed(*query(url), "10.0.0.2") is None  # another address has its own budget
    other, _ = g.signer.url(8)
    assert g.check_signed(*query(other), "10.0.0.1") is None  # and another player's URL
    assert g.check(f"Bearer {KEY}", "10.0.0.1", "/v1/search") is None  # and searches still go


def test_made_up_signed_urls_are_refused_before_they_spend_any_budget():
    g = media_gate()
    url, _ = g.signer.url(7)
    path, q = query(url)
    for junk in (
        q.replace(b"sig=", b"sig=x"),
        b"exp=1&sig=x",
        b"",
        q.replace(b"exp=", b"exp=1"),
    ):
        assert g.check_signed(path, junk, "10.0.0.1").status_code == 403
    for junk_path in ("/media/8", "/media/x", "/media/7/", "/media/+7"):
        assert g.check_signed(junk_path, q, "10.0.0.1").status_code == 403
    assert [g.check_signed(path, q, "10.0.0.1") for _ in range(2)] == [None, None]
