"""Real features from an aggregator on one Ray node to a shard on another, across a shaped
link of the network test bed, on the shard stream (root and `ip netns` needed; skips where
they are missing)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from deploy.netbed import NetBed, available
from tests._helpers import json_from_bed
from vifusion.runtime import RAY_TUNED

pytestmark = pytest.mark.netbed

ROOT = Path(__file__).resolve().parents[2]

DRIVER = r"""
import json, sys, tempfile, time
from pathlib import Path
import numpy as np, ray
sys.path.insert(0, sys.argv[2])
from vifusion.config import Config
from vifusion.fusion import Aggregator, Handoff
from vifusion.index.replica import ShardReplica
from vifusion.types import FusedBatch

ray.init(address=sys.argv[1], log_to_driver=False)
cfg = Config(data_dir=Path(tempfile.mkdtemp()), faiss_threads=1, compression="off")
shard = ray.remote(ShardReplica).options(resources={"host1": 1}).remote(0, cfg.data_dir / "shard", cfg, [])
agg = ray.remote(Aggregator).options(resources={"host0": 1}, max_concurrency=8).remote(cfg, [shard])
rng = np.random.default_rng(0)
unit = lambda x: (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def hand_over(agg, video, vis, sem):  # 120 frames, 16 at a time, one hand-over in flight
    handoff, handing = Handoff(agg), None
    for i in range(0, 120, 16):
        n = min(16, 120 - i)
        spans = np.stack([np.arange(i, i + n), np.arange(i + 1, i + n + 1)], 1)
        if handing is not None:
            handing.result()
        handing = handoff.submit(0, FusedBatch.of_video(video, i, spans, vis[i:i + n], sem[i:i + n]), time.time())
    handing.result()
    return handoff.by_socket


sent = {video: (unit(rng.standard_normal((120, 1280))), unit(rng.standard_normal((120, 384))))
        for video in range(1, 6)}
# videos 1-4 from host 0, the aggregator's (its local socket), video 5 from host 1 (whose
# network namespace cannot see that socket: by actor call)
by_socket = {v: hand_over(agg, v, *sent[v]) for v in range(1, 5)}
far = ray.remote(hand_over).options(resources={"host1": 1}, num_cpus=0)
by_socket[5] = ray.get(far.remote(agg, 5, *sent[5]))
acked = {v: ray.get(agg.finish.remote(v))[0] for v in sent}
exact = all(np.array_equal(ray.get(shard.frames.remote("visual", v, 0, 1e9))[1], sent[v][0])
            and np.array_equal(ray.get(shard.frames.remote("semantic", v, 0, 1e9))[1], sent[v][1]) for v in sent)
where = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
stats = ray.get(agg.stats.remote())
print(json.dumps({"acked": acked, "exact": exact, "vectors": ray.get(shard.stats.remote())["vectors"],
                  "videos": sorted(ray.get(shard.video_ids.remote())), "batches": stats["batches"],
                  "by_socket": by_socket, "rows_out": stats["rows_out"], "rows_by_stream": stats["rows_by_stream"],
                  "stream_failures": stats["links"][0]["stream_failures"]}))
"""


@pytest.mark.slow
def test_every_feature_crosses_the_shaped_link_exactly_once(tmp_path):
    if (reason := available()) is not None:
        pytest.skip(reason)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    with NetBed(hosts=2, rate="20mbit", delay_ms=5) as bed:
        address = bed.start_ray(num_cpus=1, env=RAY_TUNED)
        rx = bed.rx_bytes(1)
        got = json_from_bed(bed, [sys.executable, str(driver), address, str(ROOT)], timeout=180)
        crossed = bed.rx_bytes(1) - rx
    assert got["acked"] == {str(v): 120 for v in range(1, 6)}
    assert got["by_socket"] == {"1": True, "2": True, "3": True, "4": True, "5": False}
    assert got["vectors"] == {
        "visual": 600,
        "semantic": 600,
        "speech": 0,
        "screen": 0,
    }  # none lost, none twice
    assert got["videos"] == [1, 2, 3, 4, 5]
    assert got["exact"]  # a clear link: exact fp32, bit-identical
    assert got["batches"] < 600 / 4  # fused, not one call per frame
    # to the shard on the shard stream across the link (the first batches by actor call
    # while the shard's address is on its way), and it never failed
    assert got["rows_by_stream"] >= got["rows_out"] / 2 and got["stream_failures"] == []
    assert crossed >= 600 * 6656  # the features really crossed the shaped link
