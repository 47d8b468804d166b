"""The plan follower where it runs, in the ingest pool: with a plan applied on the running
cluster, the pool reports the plan's predicted frames/s and its re-plans through the
service's stats into the /metrics text. (What the pool reads of its links:
tests/serve/test_app.py, on the session's service, whose aggregators have sent; a lasting
change, planned for: test_follow.py.)"""

from __future__ import annotations

import time

from serve._metrics import Metrics
from vifusion.config import Config
from vifusion.plan.model import from_ray
from vifusion.plan.planner import apply, make_plan
from vifusion.plan.simulate import StageCosts
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
