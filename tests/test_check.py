"""`vifusion check` on a real data dir (real SQLite, real shard actors) with drift made by hand."""

from __future__ import annotations

import numpy as np
import ray

from tests.fusion._frames import frames
from vifusion import cli
from vifusion.config import Config
from vifusion.index import shard_for
from vifusion.runtime import Runtime


def ready_video(rt: Runtime, n: int = 4) -> int:
    """A ready video with n vectors in its shard."""
    video_id, job_id = rt.catalog.add_video(f"/videos/v{n}.mp4", f"v{n}")
    ray.get(rt.shards.handle_for(video_id).add.remote(frames(video_id, n)))
    rt.catalog.update_job(job_id, "ready", frames_indexed=n)
    return video_id


def test_check_finds_each_kind_of_drift_and_repair_removes_it(ray_session, tmp_path, capsys):
    cfg = Config(data_dir=tmp_path / "data", num_shards=2)
    with Runtime(cfg, writer=True) as rt:
        fine, lost, stray = ready_video(rt), ready_video(rt), ready_video(rt)
        ray.get(rt.shards.handle_for(lost).delete_video.remote(lost))  # its vectors are gone
        rt.catalog.delete_video(stray)  # the catalog forgot it; the shard did not
        wrong = 1 - shard_for(fine, 2)
        ray.get(rt.shards.handles[wrong].add.remote(frames(fine, 2, start=10)))  # a copy where no search looks
    args = ["check", "--data-dir", str(cfg.data_dir)]

    assert cli.main(args) == 1
    out = capsys.readouterr().out
    assert f"missing   video {lost}: ready in the catalog, no vectors in shard {shard_for(lost, 2)}" in out
    assert f"orphan    video {stray}: vectors in shard {shard_for(stray, 2)}, not in the catalog" in out
    assert f"misplaced video {fine}: vectors in shard {wrong}, routed to shard {shard_for(fine, 2)}" in out

    assert cli.main([*args, "--repair"]) == 0
    assert "repaired 3 problem(s); 0 left" in capsys.readouterr().out
    assert cli.main(args) == 0
    assert "consistent: 1 ready video(s)" in capsys.readouterr().out

    with Runtime(cfg) as rt:
        assert rt.catalog.get_video(lost).status == "queued"  # indexed again at the next start
        assert [j.video_id for j in rt.catalog.jobs_in(("queued",))] == [lost]
        held = {s: ray.get(h.video_ids.remote()) for s, h in enumerate(rt.shards.handles)}
        assert held[shard_for(fine, 2)] == [fine] and held[wrong] == []
        times, _ = rt.shards.frames("visual", fine, 0, 1e9)
        assert np.asarray(times).tolist() == [[i, i + 1] for i in range(4)]  # the right copy untouched
