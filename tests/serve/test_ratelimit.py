"""Requests per API key: the token bucket alone, then live on the service."""

from __future__ import annotations

import time

import pytest
from ray import serve

from serve._ratelimit import RateLimiter


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


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        RateLimiter(rate=0, burst=1)
    with pytest.raises(ValueError):
        RateLimiter(rate=1, burst=0)


def test_live_limit_answers_429_with_retry_after(live):
    """Lower the limit live (Serve user_config; behind HAProxy that replaces the replica), hit it, restore."""
    from serve.app import ViFusionApp

    def redeploy(rps: float, burst: int) -> None:
        app = ViFusionApp.options(user_config={"rate_limit_rps": rps, "rate_limit_burst": burst})
        serve.run(app.bind(live.cfg), name="vifusion", route_prefix="/")
        # Behind HAProxy a user_config change replaces the replica, and serve.run can return
        # while the old one still answers: wait until the new one is the only one left.
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            states = serve.status().applications["vifusion"].deployments["ViFusionApp"].replica_states
            if dict(states) == {"RUNNING": 1}:
                return
            time.sleep(0.5)
        raise TimeoutError(f"replica not replaced: {states}")

    redeploy(0.5, 5)
    try:
        # Until HAProxy has let go of the replaced replica, a few requests may still reach it
        # (unlimited): so ask until the first 429, for at most 15 s.
        codes, limited = [], None
        for _ in range(150):
            r = live.client.get("/v1/videos", params={"limit": 1})
            codes.append(r.status_code)
            if r.status_code == 429:
                limited = r
                break
            time.sleep(0.1)
        assert limited is not None and set(codes[:-1]) == {200} and len(codes) > 5, codes
        assert int(limited.headers["retry-after"]) >= 1
        assert limited.json()["error"]["code"] == "rate_limited"
        # Another key (even a wrong one) is not throttled by this one's bucket: it gets its 401.
        assert live.anon.get("/v1/videos", headers={"Authorization": "Bearer other"}).status_code == 401
    finally:
        redeploy(live.cfg.rate_limit_rps, live.cfg.rate_limit_burst)
    assert live.client.get("/v1/videos").status_code == 200
    assert live.anon.get("/healthz").json()["vectors"] == live.vectors  # same replica: nothing re-ingested or lost
