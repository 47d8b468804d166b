import pytest

from vifusion.catalog import open_catalog
from vifusion.config import Config


def test_job_lifecycle_is_recorded_and_survives_reopen(catalog):
    cat = catalog.open()
    vid, job = cat.add_video("/v/a.mp4", "a", {"team": "x"}, sha256="abc", size_bytes=10)
    assert cat.get_job(job).status == "queued"
    cat.set_video_info(vid, 12.0, 24.0, 320, 240)
    cat.update_job(job, "indexing", progress=0.5, frames_indexed=6)
    assert cat.get_job(job).progress == 0.5
    cat.update_job(job, "ready", frames_indexed=12)
    cat.close()

    again = catalog.open()
    v = again.get_video(vid)
    assert (v.status, v.frames_indexed, v.duration_s, v.width, v.metadata) == (
        "ready",
        12,
        12.0,
        320,
        {"team": "x"},
    )
    j = again.get_job(job)
    assert (j.status, j.progress) == ("ready", 1.0)
    assert again.find_ready("abc").id == vid


def test_failed_job_keeps_reason_and_is_not_found_as_ready(catalog):
    cat = catalog.open()
    vid, job = cat.add_video("/v/b.mp4", "b", sha256="def")
    cat.update_job(job, "failed", error="b.mp4: truncated")
    assert cat.get_video(vid).error == "b.mp4: truncated"
    assert cat.find_ready("def") is None


def test_unknown_status_is_refused(catalog):
    cat = catalog.open()
    _, job = cat.add_video("/v/c.mp4", "c")
    with pytest.raises(ValueError):
        cat.update_job(job, "done")


def test_list_and_delete(catalog):
    cat = catalog.open()
    ids = [cat.add_video(f"/v/{i}.mp4", str(i))[0] for i in range(5)]
    assert [v.id for v in cat.list_videos(limit=2)] == ids[:2]
    assert [v.id for v in cat.list_videos(limit=10, after_id=ids[2])] == ids[3:]
    assert cat.delete_video(ids[0]) and cat.get_video(ids[0]) is None
    assert not cat.delete_video(ids[0])


def test_ready_ids_filters_on_metadata_by_type(catalog):
    cat = catalog.open()
    made = {}
    for name, meta in {
        "a": {"team": "x", "n": 1, "live": True},
        "b": {"team": "x", "n": "1", "live": False},
        "c": {"team": "y", "n": 1},
        "q": {"team": "x"},
    }.items():
        vid, job = cat.add_video(f"/v/{name}.mp4", name, meta)
        if name != "q":  # q stays queued
            cat.update_job(job, "ready")
        made[name] = vid
    assert cat.ready_ids(metadata={"team": "x"}) == {made["a"], made["b"]}
    assert cat.ready_ids(metadata={"n": 1}) == {made["a"], made["c"]}  # the string "1" is not 1
    assert cat.ready_ids(metadata={"live": True}) == {made["a"]}
    assert cat.ready_ids(metadata={"n": True}) == set()  # true is not 1 either
    assert cat.ready_ids([made["a"], made["q"]]) == {made["a"]}
    assert cat.ready_ids([]) == set()
    with pytest.raises(ValueError):
        cat.ready_ids(metadata={'x") OR 1=1 --': 1})


def test_job_queue_order_and_a_deleted_videos_job_is_gone(catalog):
    cat = catalog.open()
    v1, j1 = cat.add_video("/v/1.mp4", "1")
    v2, j2 = cat.add_video("/v/2.mp4", "2")
    assert [j.id for j in cat.jobs_in(("queued",))] == [j1, j2]
    cat.update_job(j1, "indexing")
    assert [j.id for j in cat.jobs_in(("queued",))] == [j2]
    assert cat.delete_video(v1)
    assert cat.update_job(j1, "ready") is False  # nothing to move: the video was deleted
    assert cat.get_job(j1) is None and cat.counts() == {"queued": 1}


def test_catalog_written_before_media_column_is_upgraded(tmp_path):
    import sqlite3

    path = tmp_path / "catalog.db"
    open_catalog(Config(data_dir=tmp_path)).close()
    with sqlite3.connect(path) as c:  # an old catalog: no media column, no versions
        c.execute("ALTER TABLE videos DROP COLUMN media")
        c.execute("ALTER TABLE jobs DROP COLUMN lease_owner")  # nor leases
        c.execute("ALTER TABLE jobs DROP COLUMN lease_until")
        c.execute("ALTER TABLE jobs DROP COLUMN attempts")
        c.execute("DROP TABLE schema_version")
    cat = open_catalog(Config(data_dir=tmp_path))
    vid, _ = cat.add_video("/v/a.mp4", "a", media=tmp_path / "a.mp4")
    assert cat.get_video(vid).media_path == tmp_path / "a.mp4"


def test_a_job_names_its_stage_and_keeps_its_warnings(catalog):
    cat = catalog.open()
    _, job = cat.add_video("/v/talk.mp4", "talk")
    assert (cat.get_job(job).stage, cat.get_job(job).warnings) == (None, ())
    cat.update_job(job, "decoding", stage="probing", warnings=[])
    cat.update_job(
        job, "indexing", progress=0.5, stage="speech", warnings=["talk.mp4: no audio track"]
    )
    cat.update_job(job, "indexing", progress=0.9)  # stage and warnings kept
    j = cat.get_job(job)
    assert (j.status, j.stage, j.warnings) == ("indexing", "speech", ("talk.mp4: no audio track",))
    with pytest.raises(ValueError, match="unknown job stage"):
        cat.update_job(job, "indexing", stage="dancing")
    cat.update_job(job, "ready")
    j = cat.get_job(job)
    assert (j.status, j.stage, j.warnings) == ("ready", None, ("talk.mp4: no audio track",))


def test_catalog_written_before_job_stages_is_upgraded(tmp_path):
    import sqlite3

    path = tmp_path / "catalog.db"
    open_catalog(Config(data_dir=tmp_path)).close()
    with sqlite3.connect(
        path
    ) as c:  # a data dir of an earlier release: jobs without stage or warnings
        c.execute("ALTER TABLE jobs DROP COLUMN stage")
        c.execute("ALTER TABLE jobs DROP COLUMN warnings")
        c.execute("ALTER TABLE jobs DROP COLUMN lease_owner")  # nor leases
        c.execute("ALTER TABLE jobs DROP COLUMN lease_until")
        c.execute("ALTER TABLE jobs DROP COLUMN attempts")
        c.execute("DROP TABLE schema_version")
        c.execute(
            "INSERT INTO videos (source, title, status, created_at) VALUES ('/v/a.mp4', 'a', 'ready', 0)"
        )
        c.execute(
            "INSERT INTO jobs (id, video_id, status, progress, created_at, updated_at)"
            " VALUES ('old', 1, 'ready', 1.0, 0, 0)"
        )
    cat = open_catalog(Config(data_dir=tmp_path))
    assert (cat.get_job("old").stage, cat.get_job("old").warnings) == (None, ())
    _, job = cat.add_video("/v/b.mp4", "b")
    cat.update_job(job, "failed", error="b.mp4: truncated", stage="frames", warnings=["w"])
    j = cat.get_job(job)
    assert (j.status, j.stage, j.warnings) == ("failed", "frames", ("w",))
