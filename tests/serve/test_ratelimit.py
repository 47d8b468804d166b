"""Requests per client (API key and address), thumbnails and media on a budget of their own:
the token bucket alone, the gate, then live on the service."""

from __future__ import annotations

import time

import httpx
import pytest
from ray import serve

from serve import _ratelimit
from serve._auth import Gate
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


@pytest.mark.slow
def test_live_limit_answers_429_with_retry_after(live):
    """Lower the limits live (Serve user_config; behind HAProxy that replaces the replica), hit
    them, restore. Thumbnails first: once their budget is spent, searches still go."""
    from serve.app import ViFusionApp

    def redeploy(**limits) -> None:
        app = ViFusionApp.options(user_config=limits)
        serve.run(app.bind(live.cfg), name="vifusion", route_prefix="/")
        # Behind HAProxy a user_config change replaces the replica, and serve.run can return
        # while the old one still answers: wait until the new one is the only one left.
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            states = (
                serve.status().applications["vifusion"].deployments["ViFusionApp"].replica_states
            )
            if dict(states) == {"RUNNING": 1}:
                return
            time.sleep(0.5)
        raise TimeoutError(f"replica not replaced: {states}")

    redeploy(
        rate_limit_rps=0.5, rate_limit_burst=6, rate_limit_media_rps=0.5, rate_limit_media_burst=3
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
        redeploy(
            **{
                name: getattr(live.cfg, name)
                for name in (
                    "rate_limit_rps",
                    "rate_limit_burst",
                    "rate_limit_media_rps",
                    "rate_limit_media_burst",
                )
            }
        )
    assert live.client.get("/v1/videos").status_code == 200
    assert (
        live.anon.get("/healthz").json()["vectors"] == live.vectors
    )  # same replica: nothing re-ingested or lost
