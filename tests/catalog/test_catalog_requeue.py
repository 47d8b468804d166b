"""Requeueing a video only in a given status (a retry of a failed one), and each video's
latest job (what the library shows)."""

from vifusion.catalog import open_catalog
from vifusion.config import Config


def test_requeue_if_failed_makes_one_job_and_leaves_others_alone(tmp_path):
    cat = open_catalog(Config(data_dir=tmp_path))
    failed, job = cat.add_video("/v/a.mp4", "a")
    cat.update_job(job, "failed", error="a.mp4: truncated")
    ready, done = cat.add_video("/v/b.mp4", "b")
    cat.update_job(done, "ready", frames_indexed=3)

    again = cat.requeue(failed, "retrying", if_status="failed")
    assert again is not None and again != job
    assert (
        cat.requeue(failed, "retrying", if_status="failed") is None
    )  # queued now: a second retry makes nothing
    assert cat.requeue(ready, "retrying", if_status="failed") is None
    assert cat.get_video(ready).status == "ready"
    assert cat.requeue(999, "retrying", if_status="failed") is None
    assert [j.id for j in cat.jobs_in(("queued",))] == [again]

    latest = cat.latest_jobs([failed, ready, 999])
    assert set(latest) == {failed, ready}
    assert latest[failed].id == again and latest[failed].status == "queued"
    assert latest[ready].id == done
    assert cat.latest_jobs([]) == {}
