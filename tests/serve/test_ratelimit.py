"""Requests per client (API key and address), thumbnails and media on a budget of their own:
the token bucket alone, the gate, then live on the service."""

from __future__ import annotations

import time

import httpx
import pytest
from ray import serve

from serve import _ratelimit
from serve._auth import Gate, client_address
from serve._ratelimit import RateLimiter
from vifusion.config import Config

from .conftest import KEY


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_burst_then_the_sustained_rate():
    clock = Clock()
    limiter = RateLimiter(rate=2, burst=3, clock=clock)
    assert [limiter.take("k") for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = limiter.take("k")
    assert wait == pytest.approx(0.5)
    clock.now += 0.5
    assert limiter.take("k") == 0.0
    assert limiter.take("k") > 0


def test_keys_have_their_own_buckets():
    limiter = RateLimiter(rate=1, burst=1, clock=Clock())
    assert limiter.take("a") == 0.0
    assert limiter.take("a") > 0
    assert limiter.take("b") == 0.0


def test_many_clients_do_not_grow_memory_forever(monkeypatch):
    monkeypatch.setattr(_ratelimit, "_PRUNE_AT", 100)
    clock = Clock()
    limiter = RateLimiter(rate=10, burst=5, clock=clock)
    for i in range(100):
        limiter.take(("key", f"10.0.0.{i}"))
    clock.now += 0.5  # every one of them full again
    assert limiter.take(("key", "10.0.1.1")) == 0.0
    assert len(limiter) == 1
    for i in range(100):
        limiter.take(("key", f"10.0.2.{i}"))
    # Pruned again at 100 buckets, but none of these was full: 10.0.2.0 still has its 4 of 5.
    assert [limiter.take(("key", "10.0.2.0")) for _ in range(4)] == [0.0] * 4
    assert limiter.take(("key", "10.0.2.0")) > 0


def gate(**limits) -> Gate:
    g = Gate()
    g.configure(KEY, Config(**limits))
    return g


def test_each_address_has_its_own_budget():
    g = gate(rate_limit_rps=0.01, rate_limit_burst=2)
    auth = f"Bearer {KEY}"
    assert [g.check(auth, "10.0.0.1", "/v1/search") for _ in range(2)] == [None, None]
    assert g.check(auth, "10.0.0.1", "/v1/search").status_code == 429
    assert (
        g.check(auth, "10.0.0.2", "/v1/search") is None
    )  # another client, same key: not locked out


def test_thumbnails_and_media_do_not_use_up_the_search_budget():
    g = gate(
        rate_limit_rps=0.01, rate_limit_burst=2, rate_limit_media_rps=0.01, rate_limit_media_burst=3
    )
    auth = f"Bearer {KEY}"
    for path in ("/v1/videos/1/thumbnail", "/v1/videos/2/thumbnail", "/v1/videos/1/media"):
        assert g.check(auth, "10.0.0.1", path) is None
    assert g.check(auth, "10.0.0.1", "/v1/videos/3/thumbnail").status_code == 429
    assert g.check(auth, "10.0.0.1", "/v1/search") is None
    assert g.check(auth, "10.0.0.1", "/v1/videos/1") is None  # a video's record is not media
    assert g.check(auth, "10.0.0.1", "/v1/search").status_code == 429
    assert g.check(auth, "10.0.0.2", "/v1/videos/1/media") is None


def address_behind(peer: str, headers: list[tuple[bytes, bytes]]) -> str:
    """``client_address`` of a request from ``peer``, after uvicorn's proxy-header handling
    (as the replica's server applies it behind HAProxy)."""
    import asyncio

    from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

    seen = []

    async def app(scope, receive, send) -> None:
        seen.append(client_address(scope))

    scope = {"type": "http", "client": (peer, 40000), "headers": headers}
    asyncio.run(ProxyHeadersMiddleware(app, trusted_hosts="127.0.0.1,::1")(scope, None, None))
    return seen[0]


def test_the_address_haproxy_names_is_the_bucket_and_a_remote_peers_header_is_not():
    # Behind the ingress, X-Forwarded-For is what HAProxy set (it replaces the client's:
    # tests/serve/test_ingress.py); from a peer that is not loopback, uvicorn ignores it.
    set_by_haproxy = [(b"x-forwarded-for", b"203.0.113.7")]
    assert address_behind("127.0.0.1", set_by_haproxy) == "203.0.113.7"
    assert address_behind("127.0.0.1", []) == "127.0.0.1"  # a client on this machine
    assert address_behind("10.0.0.5", set_by_haproxy) == "10.0.0.5"  # its header: ignored


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        RateLimiter(rate=0, burst=1)
    with pytest.raises(ValueError):
        RateLimiter(rate=1, burst=0)


def first_429(request) -> tuple[httpx.Response, list[int]]:
    """Send ``request()`` until it answers 429, for at most 15 s: until HAProxy has let go of a
    replaced replica, a few requests may still reach it (with its old, high limit)."""
    codes = []
    for _ in range(150):
        r = request()
        codes.append(r.status_code)
        if r.status_code == 429:
            return r, codes
        time.sleep(0.1)
    raise AssertionError(f"no 429 in {codes}")


def redeploy(live, **limits) -> None:
    """Serve the app with these limits (Serve user_config; behind HAProxy that replaces the
    replica) and wait until the new replica is the only one left."""
    from serve.app import ViFusionApp

    app = ViFusionApp.options(user_config=limits)
    serve.run(app.bind(live.cfg), name="vifusion", route_prefix="/")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        states = serve.status().applications["vifusion"].deployments["ViFusionApp"].replica_states
        if dict(states) == {"RUNNING": 1}:
            return
        time.sleep(0.5)
    raise TimeoutError(f"replica not replaced: {states}")


def restore(live) -> None:
    names = ("rate_limit_rps", "rate_limit_burst", "rate_limit_media_rps", "rate_limit_media_burst")
    redeploy(live, **{name: getattr(live.cfg, name) for name in names})


@pytest.mark.slow
def test_live_limit_answers_429_with_retry_after(live):
    """Lower the limits live (Serve user_config; behind HAProxy that replaces the replica), hit
    them, restore. Thumbnails first: once their budget is spent, searches still go."""
    redeploy(
        live,
        rate_limit_rps=0.5,
        rate_limit_burst=6,
        rate_limit_media_rps=0.5,
        rate_limit_media_burst=3,
    )
    try:
        thumbnail = f"/v1/videos/{live.ids['kitchen.mp4']}/thumbnail"
        limited, codes = first_429(lambda: live.client.get(thumbnail, params={"t": 1.0}))
        assert set(codes[:-1]) == {200} and len(codes) > 3, codes
        assert limited.json()["error"]["code"] == "rate_limited"
        # A page of thumbnails has used up its budget, not the user's searches.
        r = live.client.post("/v1/search", json={"text": "a cat", "top_k": 3})
        assert r.status_code == 200, r.text

        limited, codes = first_429(lambda: live.client.get("/v1/videos", params={"limit": 1}))
        assert set(codes[:-1]) == {200} and len(codes) > 5, codes
        assert int(limited.headers["retry-after"]) >= 1
        assert limited.json()["error"]["code"] == "rate_limited"
        # Another key (even a wrong one) is not throttled by this one's bucket: it gets its 401.
        assert (
            live.anon.get("/v1/videos", headers={"Authorization": "Bearer other"}).status_code
            == 401
        )
    finally:
        restore(live)
    assert live.client.get("/v1/videos").status_code == 200
    assert (
        live.anon.get("/healthz").json()["vectors"] == live.vectors
    )  # same replica: nothing re-ingested or lost


@pytest.mark.slow
def from_address(live, address: str) -> httpx.Client:
    """A client of the live service whose connections come from ``address`` (a loopback
    address other than 127.0.0.1: another machine, as HAProxy sees it)."""
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(
        base_url=live.url, headers=live.client.headers, timeout=60, transport=transport
    )


def test_junk_and_forged_addresses_do_not_stop_a_player(live):
    """Behind HAProxy each client is charged by the address HAProxy saw: an X-Forwarded-For
    it writes gets no bucket of its own, a client at another address has its own. A burst of
    made-up signed URLs is refused (403) without spending anyone's budget, so a real player's
    URL still plays; a URL hammered spends its own budget only."""
    from tests.serve.test_media_url import signed, tampered

    kitchen = signed(live, live.ids["kitchen.mp4"])  # minted before the limits drop
    street = signed(live, live.ids["street.mp4"])
    redeploy(
        live,
        rate_limit_rps=0.01,
        rate_limit_burst=3,
        rate_limit_media_rps=0.01,
        rate_limit_media_burst=4,
    )
    try:
        # The /v1 budget spent (and the new replica the one answering)...
        first_429(lambda: live.client.get("/v1/videos", params={"limit": 1}))
        # ... a made-up client address does not open a new one (HAProxy replaces it) ...
        for forged in ("203.0.113.7", "198.51.100.1, 203.0.113.8", "::1", "127.0.0.2"):
            r = live.client.get("/v1/videos", headers={"X-Forwarded-For": forged})
            assert r.status_code == 429, (forged, r.status_code)
        # ... while a client at another address has its own budget.
        with from_address(live, "127.0.0.2") as other:
            assert other.get("/v1/videos", params={"limit": 1}).status_code == 200
            first_429(lambda: other.get("/v1/videos", params={"limit": 1}))

        junk = [live.anon.get(tampered(kitchen, sig="x" * n)).status_code for n in range(1, 31)]
        assert set(junk) == {403}, junk
        r = live.anon.get(kitchen, headers={"Range": "bytes=0-99"})
        assert r.status_code == 206, r.text  # the player still plays

        # One URL hammered spends its own budget, not another player's.
        first_429(lambda: live.anon.get(kitchen, headers={"Range": "bytes=0-9"}))
        r = live.anon.get(kitchen, headers={"Range": "bytes=0-9", "X-Forwarded-For": "192.0.2.9"})
        assert r.status_code == 429
        assert live.anon.get(street, headers={"Range": "bytes=0-99"}).status_code == 206
    finally:
        restore(live)
    assert live.client.get("/v1/videos").status_code == 200
