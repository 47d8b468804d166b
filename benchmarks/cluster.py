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

**Scaling with nodes** (``--extract-nodes 1,2,4``): one bed of a head, a shard host and as
many extract hosts as the largest count, each extract host's Ray processes in a CPU cgroup
of its own with ``--cores-per-host`` (0.4) of a core, so the host, not this machine's two
cores, is the unit (four hosts take 1.6 cores; the head, the shard host and the delay line
share the rest, uncapped). Per count ``n``, one extractor on each of ``n`` hosts indexes
``n`` x ``--videos-per-node`` videos (each extractor the same work), fusion off and on,
alternating; speech and on-screen text off, so frames are the work. Scaling efficiency:
frames/s at 4 nodes / (4 x frames/s at 1 node), ``scaling_efficiency_4_on`` / ``_off``.

Run:  sudo .venv/bin/python benchmarks/cluster.py [--quick] [--extract-nodes 1,2,4]
It ends with one line of JSON holding every figure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BED_PHOTOS as PHOTOS  # noqa: E402
from _common import arguments, drive_in_bed, emit_result, index_figures, report_head, run_benchmark

MODES = {"off": {"fusion": False, "compression": "off"}, "on": {}}
# Scaling: frames are the work (no speech, no OCR); one torch thread, as a host of under a
# core cannot use two.
SCALING_CFG = {"speech": False, "screen_text": False, "torch_threads": 1}


def drive(spec: dict) -> None:
    """In host 0: index the videos in one mode; print the figures."""
    import ray

    from vifusion.config import Config
    from vifusion.runtime import Runtime

    ray.init(address=spec["address"], log_to_driver=False)
    mode = spec["mode"]
    cfg = Config(
        data_dir=Path(spec["work"]) / spec.get("data", f"data-{mode}"),
        ray_address=spec["address"],
        sample_fps=spec["sample_fps"],
        **MODES[mode],
        **spec.get("cfg", {}),
    )
    # Scaling: the caller sets the extract hosts' CPU shares between LOADED and INDEXED (a
    # host's namespace has a sysfs of its own, without the cgroups), so models load unlimited.
    handshake = spec.get("handshake", False)
    with Runtime(cfg, writer=True) as rt:
        ray.get([e.device.remote() for e in rt.indexer.extractors])  # models loaded
        if handshake:
            print("LOADED", flush=True)
            sys.stdin.readline()
        t0 = time.perf_counter()
        results = rt.indexer.index_files([Path(f) for f in spec["videos"]])
        wall = time.perf_counter() - t0
        if handshake:
            print("INDEXED", flush=True)
        stats = ray.get([a.stats.remote() for a in rt.indexer.aggregators.values()])
    emit_result(
        index_figures(results, wall)
        | {
            "vectors_sent": sum(s.get("rows_out", 0) for s in stats),
            "messages": sum(s.get("batches", 0) for s in stats),
            "feature_bytes": sum(s.get("wire_bytes", 0) for s in stats),
            "codec_rows": {k: v for s in stats for k, v in s.get("codec_rows", {}).items()},
        }
    )


def main() -> int:
    ap = arguments(__doc__, quick="fewer, shorter videos (about a minute)", drive=True)
    ap.add_argument(
        "--extract-nodes",
        type=lambda text: sorted({int(n) for n in text.split(",")}),
        help="scaling with nodes: these counts of extract hosts, e.g. 1,2,4",
    )
    ap.add_argument(
        "--cores-per-host", type=float, default=0.4, help="each extract host's CPU share (cores)"
    )
    ap.add_argument("--videos-per-node", type=int, help="videos per extract host (default 2)")
    args = ap.parse_args()
    if args.drive:
        drive(json.loads(args.drive))
        return 0
    if args.extract_nodes:
        return scaling(args)

    from deploy.netbed import NetBed, available
    from vifusion.runtime import RAY_TUNED

    if (reason := available()) is not None:
        print(f"cluster benchmark needs the network test bed: {reason}", file=sys.stderr)
        return 2
    count, scene_s, fps = (3, 2.0, 4.0) if args.quick else (10, 4.0, 4.0)
    work = Path(tempfile.mkdtemp(prefix="vf-cluster-bench-"))
    try:
        videos = [_video(work, i, scene_s) for i in range(count)]
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
                result = drive_in_bed(bed, spec, timeout=1200, failed=f"the driver failed ({mode})")
                res[mode] = result | {"extract_node_tx_bytes": bed.tx_bytes(2) - tx0}
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
                report_head("cluster", args.quick)
                | {
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


def _video(work: Path, i: int, scene_s: float) -> Path:
    """Video ``i`` of the bed's set: photo i and photo i + 3 (i + 4 from the eleventh on, so
    every video is new content, which the catalog would otherwise skip), then motion."""
    from vifusion.samples import write_video

    n = len(PHOTOS)
    photos = (PHOTOS[i % n], PHOTOS[(i + 3 + i // n) % n], "motion")
    return write_video(work / f"v{i}.mp4", photos, scene_s=scene_s).path


def _index(bed, spec: dict, groups: list[Path], cores: float) -> dict:
    """Run the driver in host 0 for one mode, the cgroups ``groups`` limited to ``cores``
    while it indexes (unlimited while models load); its RESULT line, with the seconds each
    group was throttled meanwhile."""
    from _common import limit

    with tempfile.TemporaryFile("w+") as err:
        proc = bed.exec(
            0,
            [sys.executable, __file__, "--drive", json.dumps(spec | {"handshake": True})],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=str(ROOT),
        )
        result, held = None, []
        for line in proc.stdout:
            if line.startswith("LOADED"):
                for g in groups:
                    limit(g, cores)
                held = _throttled_s(groups)
                proc.stdin.write("go\n")
                proc.stdin.flush()
            elif line.startswith("INDEXED"):
                held = [round(b - a, 1) for a, b in zip(held, _throttled_s(groups), strict=True)]
                for g in groups:
                    limit(g, None)
            elif line.startswith("RESULT "):
                result = json.loads(line[7:])
        proc.wait(timeout=60)
        if result is None:
            err.seek(0)
            raise RuntimeError(f"the driver failed ({spec['mode']}):\n{err.read()[-3000:]}")
    return result | {"throttled_s": held}


def _throttled_s(groups: list[Path]) -> list[float]:
    """Seconds each CPU cgroup has been held back by its quota so far."""
    out = []
    for d in groups:
        stat = dict(line.split() for line in (d / "cpu.stat").read_text().splitlines())
        out.append(int(stat.get("throttled_time", stat.get("throttled_usec", 0))) / 1e9)
    return out


def scaling(args: argparse.Namespace) -> int:
    """``--extract-nodes``: end-to-end frames/s per count of extract hosts, fusion off and on."""
    from _common import Cgroups, limit, ns_pids

    from deploy.netbed import NetBed, available
    from vifusion.runtime import RAY_TUNED

    if (reason := available()) is not None:
        print(f"cluster benchmark needs the network test bed: {reason}", file=sys.stderr)
        return 2
    counts = args.extract_nodes
    per_node = args.videos_per_node or 2
    scene_s, fps, rounds = (2.0, 4.0, 1) if args.quick else (4.0, 4.0, 2)
    most = counts[-1]
    work = Path(tempfile.mkdtemp(prefix="vf-scaling-bench-"))
    groups = None
    try:
        videos = [str(_video(work, i, scene_s)) for i in range(most * per_node)]
        runs: dict[int, dict[str, list[dict]]] = {n: {m: [] for m in MODES} for n in counts}
        with NetBed(hosts=2 + most, rate="100mbit", delay_ms=5, prefix="vfsc") as bed:
            extract_hosts = range(2, 2 + most)
            address = bed.start_ray(
                num_cpus=2,
                resources=[{}, {"shard": 1}] + [{"extract": 1}] * most,
                env=RAY_TUNED,
            )
            groups = Cgroups(f"{bed.bed}-x", (args.cores_per_host,) * most)
            for g, host in enumerate(extract_hosts):
                groups.move(g, ns_pids(bed.hosts[host].name))
                limit(groups.dirs[g], None)  # until a driver has loaded its models
            for r in range(rounds):
                for n in counts:
                    for mode in MODES if r % 2 == 0 else reversed(MODES):
                        spec = {
                            "address": address,
                            "videos": videos[: n * per_node],
                            "work": str(work),
                            "data": f"data-{n}-{mode}-{r}",
                            "mode": mode,
                            "sample_fps": fps,
                            "cfg": SCALING_CFG | {"num_extractors": n},
                        }
                        tx0 = sum(bed.tx_bytes(h) for h in extract_hosts)
                        res = _index(bed, spec, groups.dirs, args.cores_per_host)
                        res["extract_nodes_tx_bytes"] = (
                            sum(bed.tx_bytes(h) for h in extract_hosts) - tx0
                        )
                        runs[n][mode].append(res)
                        print(
                            f"  {n} extract node(s), fusion {mode:>3}, round {r + 1}: "
                            f"{res['frames']} frames of {res['videos_ready']} videos in "
                            f"{res['seconds']:.1f} s = {res['frames_per_s']:.1f} frames/s; "
                            f"{res['messages']} messages; throttled {res['throttled_s']} s",
                            flush=True,
                        )
        fps_of = {
            n: {m: statistics.median(x["frames_per_s"] for x in rs) for m, rs in modes.items()}
            for n, modes in runs.items()
        }
        out = report_head("cluster-scaling", args.quick) | {
            "link": "100mbit/5ms",
            "cores_per_extract_host": args.cores_per_host,
            "videos_per_node": per_node,
            "sample_fps": fps,
            "rounds": rounds,
            "frames_per_s": {
                str(n): {m: round(v, 2) for m, v in f.items()} for n, f in fps_of.items()
            },
            "runs": {str(n): modes for n, modes in runs.items()},
        }
        for mode in MODES:
            for n in counts[1:]:
                key = f"scaling_efficiency_{n}_{mode}"
                out[key] = (
                    round(fps_of[n][mode] / (n * fps_of[1][mode]), 3) if 1 in fps_of else None
                )
        print(json.dumps(out))
    finally:
        if groups is not None:
            groups.remove()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    run_benchmark(main, "cluster benchmark")
