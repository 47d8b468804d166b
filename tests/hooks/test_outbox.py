"""The outbox in the catalog, on SQLite and PostgreSQL: a job's end and a video's delete
write their event in the same transaction, one delivery per hook that wants it."""

from __future__ import annotations

import json

import pytest


def _pending(cat) -> list[tuple[str, dict]]:
    """(hook id, event) of every delivery due now, taken as a deliverer takes them."""
    return [(d.hook_id, json.loads(d.body)) for d in cat.claim_deliveries(60, 100)]


def test_job_ends_and_deletes_write_their_events_to_the_hooks_that_want_them(catalog):
    cat = catalog.open()
    every = cat.create_hook("https://example.com/all")
    ready_only = cat.create_hook("https://example.com/ready", ["job.ready"])
    other = cat.create_hook("https://example.com/news", collection="news")
    ok_video, ok_job = cat.add_video("/v/ok.mp4", "ok")
    bad_video, bad_job = cat.add_video("/v/bad.mp4", "bad")
    assert cat.update_job(ok_job, "indexing", progress=0.5)  # not an end: no event
    assert cat.update_job(ok_job, "ready", frames_indexed=12)
    assert cat.update_job(ok_job, "ready", frames_indexed=12)  # written twice: one event
    assert cat.update_job(bad_job, "failed", error="bad.mp4: not a video")
    assert cat.delete_video(ok_video)
    assert not cat.delete_video(ok_video)  # gone already: no second event

    got = _pending(cat)
    kinds = sorted((h, e["type"]) for h, e in got)
    assert kinds == sorted(
        [
            (every.id, "job.ready"),
            (every.id, "job.failed"),
            (every.id, "video.deleted"),
            (ready_only.id, "job.ready"),
        ]
    )
    assert other.id not in {h for h, _ in got}  # its collection had no video
    by_type = {e["type"]: e for h, e in got if h == every.id}
    assert by_type["job.ready"]["data"]["job_id"] == ok_job
    assert by_type["job.ready"]["data"]["video_id"] == ok_video
    assert by_type["job.ready"]["data"]["collection"] == "default"
    assert by_type["job.failed"]["data"]["error"] == "bad.mp4: not a video"
    assert by_type["job.failed"]["data"]["video_id"] == bad_video
    assert by_type["video.deleted"]["data"]["video_id"] == ok_video
    assert len({e["id"] for _, e in got}) == 3  # one event each, sent to each of its hooks
    assert _pending(cat) == []  # held by the first taker


def test_a_collection_hook_hears_only_its_collection(catalog):
    cat = catalog.open()
    news = cat.create_hook("https://example.com/news", collection="news")
    _, in_news = cat.add_video("/v/a.mp4", "a", collection="news")
    _, elsewhere = cat.add_video("/v/b.mp4", "b")
    cat.update_job(in_news, "ready")
    cat.update_job(elsewhere, "ready")
    got = _pending(cat)
    assert [(h, e["data"]["job_id"]) for h, e in got] == [(news.id, in_news)]


def test_a_job_failed_at_its_take_tells_its_hooks(catalog):
    cat = catalog.open()
    cat.create_hook("https://example.com/all", ["job.failed"])
    _, job = cat.add_video("/v/a.mp4", "a")
    cat.lease_job("w/1", 60)  # its worker died ...
    cat.expire_leases("w")
    taken = cat.lease_job("w/2", 60, max_attempts=1)  # ... as often as it may
    assert taken.status == "failed"
    [(_, event)] = _pending(cat)
    assert event["type"] == "job.failed" and event["data"]["job_id"] == job


def test_no_hook_no_outbox_and_listing_hides_the_secret(catalog):
    cat = catalog.open()
    _, job = cat.add_video("/v/a.mp4", "a")
    cat.update_job(job, "ready")
    hook = cat.create_hook("https://example.com/all")
    assert _pending(cat) == []  # the event came before the hook
    [listed] = cat.hooks()
    assert listed == hook and listed.pending == 0 and listed.last_at is None
    assert hook.secret not in repr(listed)
    with pytest.raises(ValueError, match="job.started"):
        cat.create_hook("https://example.com/x", ["job.started"])
    assert cat.delete_hook(hook.id) and not cat.delete_hook(hook.id)
    assert cat.hooks() == []
