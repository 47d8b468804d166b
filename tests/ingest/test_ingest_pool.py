"""The ingest pool (vifusion/ingest/pool.py): API replicas on one data dir share one pool, each
video they accept is indexed once, a pool killed mid-job finishes the job after Ray
restarts it, each frame once, and a job during which the pool dies again and again is
failed instead of taken for ever."""

from __future__ import annotations

import time

import pytest
import ray

from tests._helpers import QuietHandler, final_status, serving
from vifusion.cli.check import find_drift
from vifusion.cluster.actors import actor_name
from vifusion.config import Config
from vifusion.datadir import DataDirBusy
from vifusion.runtime import Runtime
from vifusion.samples import write_demo_set, write_video
from vifusion.service import Ingested, Service


def pools(cfg: Config) -> list[str]:
    """The ingest pools of ``cfg``'s data dir (other tests' services may have their own)."""
    ours = actor_name(cfg, "ingest")
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"] == ours]


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    return {v.name: v for v in write_demo_set(tmp_path_factory.mktemp("pool-videos"))}


@pytest.mark.slow
@pytest.mark.parametrize("catalog", ["sqlite", "postgres"], indirect=True)
def test_two_api_replicas_on_one_data_dir_share_one_pool_and_index_each_frame_once(
    ray_session, catalog, tmp_path, videos
):
    """On each catalog: SQLite (one machine) and PostgreSQL (a cluster's)."""
    # dedup off: every sampled frame is one vector, so vectors count frames
    cfg = Config(
        data_dir=tmp_path / "data", catalog_url=catalog.url, shared_actors=True, dedup_cosine=1.01
    )
    first = Service(cfg)
    second = None
    try:
        second = Service(cfg)  # a second API replica starts beside the first
        assert len(pools(cfg)) == 1  # and finds the first's pool
        with pytest.raises(DataDirBusy):  # `vifusion index` beside them is still refused
            Runtime(cfg, writer=True)
        jobs = {}
        for svc, name in ((first, "kitchen.mp4"), (second, "launch.mp4")):
            with open(videos[name].path, "rb") as f:
                jobs[name] = svc.ingest_upload(f, name)
        for queued in jobs.values():
            assert final_status(first.catalog, queued.job_id) == "ready", first.job(
                queued.job_id
            ).error
        frames = [first.video(q.video_id).frames_indexed for q in jobs.values()]
        assert frames == [12, 12]
        for svc in (first, second):
            assert svc.health()["vectors"] == sum(frames)  # each frame once
            assert find_drift(svc.catalog, svc.shards) == []  # `vifusion check` is clean
            page = svc.search(text="a cat", top_k=10, group_by="video", modalities=["visual"])
            assert {m.video_id for m in page.results} == {q.video_id for q in jobs.values()}
        second.close()  # one replica going leaves the pool and the shards to the other
        second = None
        with open(videos["street.mp4"].path, "rb") as f:
            third = first.ingest_upload(f, "street.mp4")
        assert final_status(first.catalog, third.job_id) == "ready"
        assert first.health()["vectors"] == sum(frames) + 12
    finally:
        if second is not None:
            second.close()
        first.shutdown()
    assert pools(cfg) == []


def upload_and_wait_mid_job(svc: Service, tmp_path) -> Ingested:
    """A 12 s video uploaded (48 frames at 4 a second); returns once its first frames are in."""
    video = write_video(tmp_path / "long.mp4", ("coffee", "rocket", "camera"), scene_s=4.0)
    with open(video.path, "rb") as f:
        queued = svc.ingest_upload(f, "long.mp4")
    deadline = time.monotonic() + 300
    while not ((job := svc.job(queued.job_id)).status == "indexing" and job.frames_indexed > 0):
        assert time.monotonic() < deadline and job.status not in ("ready", "failed"), job
        time.sleep(0.05)
    return queued


@pytest.mark.slow
def test_a_pool_killed_mid_job_is_restarted_and_the_job_ends_ready_each_frame_once(
    ray_session, tmp_path
):
    cfg = Config(data_dir=tmp_path / "data", sample_fps=4.0, dedup_cosine=1.01, embed_batch=8)
    with Service(cfg) as svc:
        queued = upload_and_wait_mid_job(svc, tmp_path)
        ray.kill(svc.jobs.actor, no_restart=False)  # Ray starts it again: same name

        assert final_status(svc.catalog, queued.job_id) == "ready", svc.job(queued.job_id).error
        job = svc.job(queued.job_id)
        assert job.frames_indexed == 48  # 12 s at 4 frames/s
        stats = svc.shards.stats()
        assert sum(s["vectors"]["visual"] for s in stats) == 48  # each frame once
        assert find_drift(svc.catalog, svc.shards) == []


@pytest.mark.slow
def test_a_pool_whose_job_was_taken_over_leaves_it_to_the_new_holder(ray_session, tmp_path):
    """The pool stalls past its lease (forced here: its lease ended) and another worker takes
    the job over: the pool's next write is refused, so it neither overwrites the new holder's
    state nor ends the job; handed back, the job runs from the start, each frame once."""
    from vifusion.catalog import open_catalog

    cfg = Config(data_dir=tmp_path / "data", sample_fps=4.0, dedup_cosine=1.01, embed_batch=8)
    with Service(cfg) as svc:
        queued = upload_and_wait_mid_job(svc, tmp_path)
        other = open_catalog(cfg)
        other.holder = "other/1"
        other.expire_leases(svc.jobs.name)
        assert other.lease_job("other/1", 300.0).id == queued.job_id

        deadline = time.monotonic() + 300
        while svc.stats()["ingest"].busy_s == 0:  # the pool let go of the job
            assert time.monotonic() < deadline
            time.sleep(0.1)
        job = svc.job(queued.job_id)
        assert (job.status, job.frames_indexed, job.lease_owner) == ("decoding", 0, "other/1")
        assert (svc.stats()["ingest"].jobs_ready, svc.stats()["ingest"].jobs_failed) == (0, 0)

        other.update_job(queued.job_id, "queued")  # handed back: the pool takes it again
        svc.jobs.wake()
        assert final_status(svc.catalog, queued.job_id) == "ready", svc.job(queued.job_id).error
        assert svc.job(queued.job_id).frames_indexed == 48
        assert sum(s["vectors"]["visual"] for s in svc.shards.stats()) == 48
        assert find_drift(svc.catalog, svc.shards) == []
        other.close()


class _Endless(QuietHandler):
    """A download that never ends: a byte every 0.1 s (the fetch stays in its first stage)."""

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "100000000")
        self.end_headers()
        try:
            for _ in range(3000):
                self.wfile.write(b"\x00")
                self.wfile.flush()
                time.sleep(0.1)
        except OSError:  # the pool died: its connection with it
            pass


@pytest.mark.slow
def test_a_job_during_which_the_pool_dies_each_time_is_failed_not_taken_for_ever(
    ray_session, tmp_path
):
    """What a URL that kills the pool (by memory, say) did: Ray restarts the pool, which
    takes the job again and dies again, for ever. Here the pool is killed in the job's fetch
    three times; its fourth incarnation fails the job saying so instead of fetching again."""
    cfg = Config(data_dir=tmp_path / "data", allow_private_urls=True, fetch_min_rate_bps=0)
    with serving(_Endless) as base, Service(cfg) as svc:
        url = f"{base}/endless.mp4"
        queued = svc.ingest_uri(url)
        for n in (1, 2, 3):
            deadline = time.monotonic() + 120
            while (job := svc.job(queued.job_id)).attempts < n or job.stage != "fetching":
                assert time.monotonic() < deadline and job.status != "failed", job
                time.sleep(0.1)
            ray.kill(svc.jobs.actor, no_restart=False)  # Ray starts it again: same name
        assert final_status(svc.catalog, queued.job_id, timeout_s=120) == "failed"
        job = svc.job(queued.job_id)
        assert job.error.startswith(
            "the ingest worker died 3 times while running this job (last: in stage fetching,"
        ), job.error
        assert (job.attempts, svc.video(queued.video_id).status) == (3, "failed")
