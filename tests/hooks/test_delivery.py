"""Delivering the outbox (vifusion/hooks/delivery.py) to a real receiver on 127.0.0.1, from a
real SQLite catalog: signed as the README says, tried again after a receiver was down,
given up after the retry window, sent once across a restart of the deliverer, and no hook
at a private address without the allowance."""

from __future__ import annotations

import time

import pytest

from tests.conftest import free_port
from tests.hooks._receiver import receiver, signed_by
from vifusion.catalog import open_catalog
from vifusion.config import Config
from vifusion.hooks import events
from vifusion.hooks.delivery import Deliverer, backoff
from vifusion.ingest.sources import SourceError


@pytest.fixture
def cfg(tmp_path) -> Config:
    # Retries a few milliseconds apart, so a test needs no long wait (no timing asserted).
    return Config(
        data_dir=tmp_path, allow_private_urls=True, hook_retry_base_s=0.01, hook_retry_max_s=0.02
    )


def _ready_job(cat, title: str = "a") -> tuple[int, str]:
    video_id, job_id = cat.add_video(f"/v/{title}.mp4", title)
    cat.update_job(job_id, "ready", frames_indexed=3)
    return video_id, job_id


def _until_settled(deliverer: Deliverer, hook_id: str, rounds: int = 500) -> None:
    """Rounds until the hook has nothing pending (each retry is a few ms off)."""
    for _ in range(rounds):
        deliverer.run_once()
        if next(h for h in deliverer.catalog.hooks() if h.id == hook_id).pending == 0:
            return
        time.sleep(0.005)
    raise AssertionError("deliveries still pending")


def test_an_event_arrives_signed_as_documented(cfg):
    cat = open_catalog(cfg)
    with receiver() as rx:
        hook = events.register(cat, cfg, rx.url)
        video_id, job_id = _ready_job(cat)
        assert Deliverer(cfg, cat).run_once() == 1
        [got] = rx.got
    assert signed_by(hook.secret, got)
    assert not signed_by("whsec_another", got)
    event = got.event
    assert got.headers["x-vifusion-event"] == event["type"] == "job.ready"
    assert got.headers["x-vifusion-delivery"] == event["id"]
    assert event["data"]["job_id"] == job_id and event["data"]["video_id"] == video_id
    [listed] = cat.hooks()
    assert (listed.last_status, listed.last_error, listed.last_state) == (200, None, "delivered")
    assert listed.last_attempts == 1 and listed.pending == 0


def test_a_receiver_down_then_up_gets_the_event_after_a_retry(cfg):
    cat = open_catalog(cfg)
    port = free_port()  # nothing listens there yet
    hook = cat.create_hook(f"http://127.0.0.1:{port}/hook")
    _, job_id = _ready_job(cat)
    deliverer = Deliverer(cfg, cat)
    assert deliverer.run_once() == 1
    [listed] = cat.hooks()
    assert listed.pending == 1 and listed.last_status is None
    assert "ConnectError" in listed.last_error
    with receiver(port) as rx:
        _until_settled(deliverer, hook.id)
        assert [e["data"]["job_id"] for e in rx.events()] == [job_id]
        assert signed_by(hook.secret, rx.got[0])
    [listed] = cat.hooks()
    assert listed.last_state == "delivered" and listed.last_attempts >= 2


def test_a_refusing_receiver_is_given_up_after_the_retry_window(cfg):
    cat = open_catalog(cfg.updated({"hook_retry_window_s": 0.05}))
    with receiver() as rx:
        rx.status = 503
        hook = cat.create_hook(rx.url)
        _ready_job(cat)
        _until_settled(Deliverer(cfg.updated({"hook_retry_window_s": 0.05}), cat), hook.id)
    [listed] = cat.hooks()
    assert listed.last_state == "failed" and listed.last_status == 503
    assert listed.last_error == "HTTP 503" and listed.pending == 0


def test_a_redirect_is_not_followed(cfg):
    cat = open_catalog(cfg)
    with receiver() as rx:
        rx.status = 307
        cat.create_hook(rx.url)
        _ready_job(cat)
        Deliverer(cfg, cat).run_once()
    [listed] = cat.hooks()
    assert listed.last_status == 307 and listed.pending == 1


def test_after_a_restart_pending_is_sent_once_and_delivered_is_not_sent_again(cfg):
    with receiver() as rx:
        cat = open_catalog(cfg)
        hook = cat.create_hook(rx.url)
        _, first = _ready_job(cat, "first")
        Deliverer(cfg, cat).run_once()  # delivered
        rx.status = 500
        _, second = _ready_job(cat, "second")
        Deliverer(cfg, cat).run_once()  # refused: pending
        cat.close()

        rx.status = 200  # the service starts again, the receiver is back
        again = open_catalog(cfg)
        _until_settled(Deliverer(cfg, again), hook.id)
        for _ in range(5):
            Deliverer(cfg, again).run_once()  # nothing more is due
        assert [e["data"]["job_id"] for e in rx.events()] == [first, second]


def test_a_private_url_is_refused_without_the_allowance(cfg, tmp_path):
    strict = cfg.updated({"allow_private_urls": False})
    cat = open_catalog(strict)
    with receiver() as rx:
        with pytest.raises(SourceError) as refused:
            events.register(cat, strict, rx.url)
        assert refused.value.code == "forbidden_address"
        assert cat.hooks() == []
        # One registered while allowed is not sent to once the allowance is gone.
        cat.create_hook(rx.url)
        _ready_job(cat)
        Deliverer(strict, cat).run_once()
        assert rx.got == []
    [listed] = cat.hooks()
    assert listed.last_error.startswith("forbidden_address") and listed.pending == 1


def test_backoff_doubles_up_to_its_cap_with_jitter(cfg):
    slow = cfg.updated({"hook_retry_base_s": 10.0, "hook_retry_max_s": 3600.0})
    for attempts, ceiling in ((1, 10.0), (2, 20.0), (5, 160.0), (30, 3600.0)):
        waits = [backoff(attempts, slow) for _ in range(50)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits)
        assert len(set(waits)) > 1


def test_a_delivery_held_by_a_deliverer_that_died_is_sent_once_its_lease_runs_out(cfg):
    cat = open_catalog(cfg)
    with receiver() as rx:
        hook = cat.create_hook(rx.url)
        _, job_id = _ready_job(cat)
        [held] = cat.claim_deliveries(lease_s=0.05, limit=10)  # taken, then its taker died
        assert Deliverer(cfg, cat).run_once() == 0  # held: no one else sends it meanwhile
        time.sleep(0.1)
        _until_settled(Deliverer(cfg, cat), hook.id)
        assert held.event_id == rx.events()[0]["id"]
        assert [e["data"]["job_id"] for e in rx.events()] == [job_id]
