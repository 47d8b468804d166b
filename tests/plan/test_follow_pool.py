"""The plan follower where it runs, in the ingest pool: with a plan applied on the running
cluster, the pool reports the plan's predicted frames/s and its re-plans through the
service's stats into the /metrics text. (What the pool reads of its links:
tests/serve/test_app.py, on the session's service, whose aggregators have sent; a lasting
change, planned for: test_follow.py.)"""

from __future__ import annotations

import time

import pytest
import ray

from serve._metrics import Metrics
from vifusion.config import Config
from vifusion.plan.hardware import from_ray
from vifusion.plan.planner import apply, make_plan
from vifusion.plan.terms import StageCosts
from vifusion.samples import write_demo_set
from vifusion.service import Service


def test_the_pool_reports_the_plan_in_force_and_its_re_plans_in_metrics(ray_session, tmp_path):
    cfg = Config(data_dir=tmp_path / "data", replan_after_s=1.0)
    with Service(cfg) as svc:  # no plan yet
        ingest = svc.stats()["ingest"]
        assert (ingest.replans, ingest.plan_predicted_fps) == (0, 0.0)
    cluster, live = from_ray()  # this host's Ray: a plan that names its node by IP
    costs = {t.name: StageCosts(decode_cs=0.005, embed_cs=0.03) for t in cluster.types}
    _, plan = make_plan(cfg, cluster, costs, live, parallel=False)
    apply(cfg, plan)
    with Service(cfg) as svc:
        deadline = time.monotonic() + 10  # the pool reads plan.json every replan_after_s / 4
        while (ingest := svc.stats()["ingest"]).plan_predicted_fps == 0:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert (ingest.replans, ingest.plan_predicted_fps) == (0, plan["predicted_fps"])
        text = Metrics().render(svc.stats()).decode()
    assert "vifusion_replans_total 0.0" in text
    assert f"vifusion_plan_predicted_frames_per_second {plan['predicted_fps']}" in text


def wait(catalog, job_id: str, timeout_s: float = 300) -> str:
    deadline = time.monotonic() + timeout_s
    while (status := catalog.get_job(job_id).status) not in ("ready", "failed"):
        assert time.monotonic() < deadline, job_id
        time.sleep(0.3)
    return status


def _in_pool(svc: Service, read):
    """``read(pool)`` run inside the data dir's ingest pool actor."""
    return ray.get(svc.jobs.actor.__ray_call__.remote(read))


@pytest.mark.slow
def test_the_pool_runs_the_plans_extractors_and_moves_them_to_a_new_plan_between_jobs(
    ray_session, tmp_path
):
    videos = {v.name: v for v in write_demo_set(tmp_path / "videos")}
    # replan_after_s 1: the pool reads plan.json every quarter second
    cfg = Config(
        data_dir=tmp_path / "data", ingest_roots=(tmp_path / "videos",), replan_after_s=1.0
    )
    cluster, live = from_ray()
    costs = {t.name: StageCosts(decode_cs=0.005, embed_cs=0.03) for t in cluster.types}
    _, plan = make_plan(cfg, cluster, costs, live, parallel=False)
    plan["nodes"][0]["extractors"] = 2  # more than num_extractors (1): the plan's count runs
    apply(cfg, plan)
    with Service(cfg) as svc:
        first = [svc.ingest_uri(videos[n].path.as_uri()) for n in ("kitchen.mp4", "street.mp4")]
        for job in first:
            assert wait(svc.catalog, job.job_id) == "ready"
        assert svc.stats()["ingest"].extractors == 2
        before = _in_pool(svc, lambda p: [e._actor_id.hex() for e in p.rt.indexer.extractors])

        # A new plan applied while the service runs (by hand here; a re-plan for a changed
        # link writes it the same way): one extractor, other fusion limits. The pool stops
        # its actors between jobs, and the next job runs on actors started by the new plan.
        plan["nodes"][0]["extractors"] = 1
        plan["fusion_min_bytes"] = 128 << 10
        apply(cfg, plan)
        deadline = time.monotonic() + 30
        while svc.stats()["ingest"].extractors:
            assert time.monotonic() < deadline, "the pool kept its extractors"
            time.sleep(0.2)
        last = svc.ingest_uri(videos["launch.mp4"].path.as_uri())
        assert wait(svc.catalog, last.job_id) == "ready"
        assert svc.stats()["ingest"].extractors == 1
        after = _in_pool(
            svc,
            lambda p: (
                [e._actor_id.hex() for e in p.rt.indexer.extractors],
                p.rt.indexer.cfg.fusion_min_bytes,
            ),
        )
    assert after[1] == 128 << 10
    assert not set(after[0]) & set(before)
    assert all(ray._private.state.actors(a)["State"] == "DEAD" for a in before)
