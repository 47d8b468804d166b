"""End-to-end indexing on a three-node Ray cluster, fusion and adaptive compression on against off.

The network test bed (``deploy/netbed.py``): host 0 is the head (the driver), host 1 carries
the ``shard`` resource (the FAISS shards), host 2 the ``extract`` one (the extractor), links
shaped to 100 Mbit / 5 ms. The same generated videos are indexed twice, into fresh data
dirs, by the real pipeline (``Runtime`` -> ``Indexer``: decode, embed, node aggregator,
shards):

- **off**: ``fusion=False, compression="off"``: every frame crosses the link as its own
  message, exact fp32 (what per-frame tensors cost);
- **on**: the defaults: fused batches sized from the link, temporal dedup, adaptive codecs.

Figures per mode: frames indexed per second (from the first job's start to the last one's
acknowledgement, models already loaded), messages and feature bytes the aggregators sent,
and bytes the extract node's interface sent over the whole run of the mode (everything:
features, Ray's control traffic, starting the actors).
On this 2-core machine decoding and embedding bound the frame rate, so the link matters
little to it; what fusion changes is the messages and bytes per frame.

Run:  sudo .venv/bin/python benchmarks/cluster.py [--quick]
It ends with one line of JSON holding every figure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BED_PHOTOS as PHOTOS  # noqa: E402
from _common import run_benchmark  # noqa: E402

MODES = {"off": {"fusion": False, "compression": "off"}, "on": {}}


def drive(spec: dict) -> None:
    """In host 0: index the videos in one mode; print the figures."""
    import ray

    from vifusion.config import Config
    from vifusion.runtime import Runtime

    ray.init(address=spec["address"], log_to_driver=False)
    mode = spec["mode"]
    cfg = Config(
        data_dir=Path(spec["work"]) / f"data-{mode}",
        ray_address=spec["address"],
        sample_fps=spec["sample_fps"],
        **MODES[mode],
    )
    with Runtime(cfg, writer=True) as rt:
        ray.get([e.device.remote() for e in rt.indexer.extractors])  # models loaded
        t0 = time.perf_counter()
        results = rt.indexer.index_files([Path(f) for f in spec["videos"]])
        wall = time.perf_counter() - t0
        stats = ray.get([a.stats.remote() for a in rt.indexer.aggregators.values()])
    frames = sum(r.frames for r in results if r.status == "ready")
    print(
        "RESULT "
        + json.dumps(
            {
                "videos_ready": sum(r.status == "ready" for r in results),
                "frames": frames,
                "seconds": wall,
                "frames_per_s": frames / wall,
                "vectors_sent": sum(s.get("rows_out", 0) for s in stats),
                "messages": sum(s.get("batches", 0) for s in stats),
                "feature_bytes": sum(s.get("wire_bytes", 0) for s in stats),
                "codec_rows": {k: v for s in stats for k, v in s.get("codec_rows", {}).items()},
            }
        ),
        flush=True,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer, shorter videos (about a minute)")
    ap.add_argument("--drive", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.drive:
        drive(json.loads(args.drive))
        return 0

    from _common import machine

    from deploy.netbed import NetBed, available
    from vifusion.runtime import RAY_TUNED
    from vifusion.samples import write_video

    if (reason := available()) is not None:
        print(f"cluster benchmark needs the network test bed: {reason}", file=sys.stderr)
        return 2
    count, scene_s, fps = (3, 2.0, 4.0) if args.quick else (10, 4.0, 4.0)
    work = Path(tempfile.mkdtemp(prefix="vf-cluster-bench-"))
    try:
        videos = [
            write_video(
                work / f"v{i}.mp4",
                (PHOTOS[i % len(PHOTOS)], PHOTOS[(i + 3) % len(PHOTOS)], "motion"),
                scene_s=scene_s,
            ).path
            for i in range(count)
        ]
        res = {}
        with NetBed(hosts=3, rate="100mbit", delay_ms=5) as bed:
            address = bed.start_ray(
                num_cpus=2, resources=[{}, {"shard": 1}, {"extract": 1}], env=RAY_TUNED
            )
            for mode in MODES:
                spec = {
                    "address": address,
                    "videos": [str(v) for v in videos],
                    "work": str(work),
                    "mode": mode,
                    "sample_fps": fps,
                }
                tx0 = bed.tx_bytes(2)
                proc = bed.exec(
                    0,
                    [sys.executable, __file__, "--drive", json.dumps(spec)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    cwd=str(ROOT),
                )
                stdout, stderr = proc.communicate(timeout=1200)
                result = next(
                    (line[7:] for line in stdout.splitlines() if line.startswith("RESULT ")), None
                )
                if result is None:
                    raise RuntimeError(f"the driver failed ({mode}):\n{stderr[-3000:]}")
                res[mode] = json.loads(result) | {"extract_node_tx_bytes": bed.tx_bytes(2) - tx0}
        for mode, r in res.items():
            print(
                f"  fusion {mode:>3}: {r['frames']} frames of {r['videos_ready']} videos in {r['seconds']:.1f} s = "
                f"{r['frames_per_s']:.1f} frames/s; {r['messages']} messages, {r['feature_bytes'] / 1e6:.2f} MB "
                f"of features ({r['codec_rows']}); extract node sent {r['extract_node_tx_bytes'] / 1e6:.2f} MB",
                flush=True,
            )
        on, off = res["on"], res["off"]
        ratios = {
            "frames_per_s_on_over_off": round(on["frames_per_s"] / off["frames_per_s"], 3),
            "messages_off_over_on": round(off["messages"] / max(on["messages"], 1), 1),
            "feature_bytes_on_over_off": round(
                on["feature_bytes"] / max(off["feature_bytes"], 1), 3
            ),
            "node_tx_on_over_off": round(
                on["extract_node_tx_bytes"] / max(off["extract_node_tx_bytes"], 1), 3
            ),
        }
        print("ratios:", ratios)
        print(
            json.dumps(
                {
                    "benchmark": "cluster",
                    "quick": args.quick,
                    "machine": machine(),
                    "date": time.strftime("%Y-%m-%d"),
                    "link": "100mbit/5ms",
                    "nodes": 3,
                    "videos": count,
                    "sample_fps": fps,
                    "modes": res,
                    "ratios": ratios,
                }
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    run_benchmark(main, "cluster benchmark")
