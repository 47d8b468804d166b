import pytest

from vifusion.catalog import Catalog


def test_job_lifecycle_is_recorded_and_survives_reopen(tmp_path):
    cat = Catalog(tmp_path / "catalog.db")
    vid, job = cat.add_video("/v/a.mp4", "a", {"team": "x"}, sha256="abc", size_bytes=10)
    assert cat.get_job(job).status == "queued"
    cat.set_video_info(vid, 12.0, 24.0, 320, 240)
    cat.update_job(job, "indexing", progress=0.5, frames_indexed=6)
    assert cat.get_job(job).progress == 0.5
    cat.update_job(job, "ready", frames_indexed=12)
    cat.close()

    again = Catalog(tmp_path / "catalog.db")
    v = again.get_video(vid)
    assert (v.status, v.frames_indexed, v.duration_s, v.width, v.metadata) == ("ready", 12, 12.0, 320, {"team": "x"})
    j = again.get_job(job)
    assert (j.status, j.progress) == ("ready", 1.0)
    assert again.find_ready("abc").id == vid


def test_failed_job_keeps_reason_and_is_not_found_as_ready(tmp_path):
    cat = Catalog(tmp_path / "c.db")
    vid, job = cat.add_video("/v/b.mp4", "b", sha256="def")
    cat.update_job(job, "failed", error="b.mp4: truncated")
    assert cat.get_video(vid).error == "b.mp4: truncated"
    assert cat.find_ready("def") is None


def test_unknown_status_is_refused(tmp_path):
    cat = Catalog(tmp_path / "c.db")
    _, job = cat.add_video("/v/c.mp4", "c")
    with pytest.raises(ValueError):
        cat.update_job(job, "done")


def test_list_and_delete(tmp_path):
    cat = Catalog(tmp_path / "c.db")
    ids = [cat.add_video(f"/v/{i}.mp4", str(i))[0] for i in range(5)]
    assert [v.id for v in cat.list_videos(limit=2)] == ids[:2]
    assert [v.id for v in cat.list_videos(limit=10, after_id=ids[2])] == ids[3:]
    assert cat.delete_video(ids[0]) and cat.get_video(ids[0]) is None
    assert not cat.delete_video(ids[0])
