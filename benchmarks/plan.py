"""Placement by simulation against the even spread, on a heterogeneous three-host bed.

The network test bed (``deploy/netbed.py``), a delay line of 10 ms on every link: host 0
(the head, the driver, where the videos are) on 1 Gbit, host 1 on 20 Mbit both ways, host 2
on 1 Gbit with a smaller CPU share. The videos are written at a web video's bitrate (x264
lossless at 320x240: about 3.6 Mbit/s, so decoding costs what the calibration measures): an
extractor on another host receives each file whole over its link before decoding it. Every
host's Ray processes run in a CPU cgroup of their own (v2 ``cpu.max``, or v1
``cpu.cfs_quota_us`` where only v1 has the cpu controller), so the three hosts share this
machine's cores as the planner is told they do. The stages are calibrated here
(``calibrate``: each stage alone, and two processes embedding at once) and scaled to each
host's embedding measured on the bed, every host at once (``Cgroups.embed_cs``); the bed is
described to the planner as three node types whose cores are those each host gets when
probed (two spinning processes in each host's cgroup, all hosts at once, and Ray's processes
there meanwhile: the quota, or less where the machine's other work takes the rest; the model
leaves ``RAY_CORES`` of them to Ray), and:

- **plan**: the search's choice for this batch of videos (``vifusion plan --batch``),
  applied (``DATA_DIR/plan.json``), then a real ingest of generated videos (``Runtime`` ->
  ``Indexer``: decode, embed, aggregate, shard);
- **even**: the even spread (the same extractors on every host, shards round-robin), applied
  the same way, on the same videos, in the same run.

Frames/s per mode are frames indexed over the wall time from the first job's start to the
last one's acknowledgement, models loaded (they load with each quota below a core raised to
one, ``Cgroups.loose``; the quotas hold from the probe before the ingest to its end); ``predicted_fps`` is the simulation of the chosen
plan on the same videos, from a probe taken once the mode's actors are up and idle. Each
mode also reports each host's CPU seconds by process during the ingest (``cpu_s``) beside
the simulation's by stage (``predicted_cpu_s``). ``search_s``, ``candidates_evaluated`` and ``candidates_pruned``
are for a described 16-node cluster (4 node types), with these stage costs.

With ``--queries-per-s Q``, both modes index while text searches arrive at random, Q a second
on average, on the head (the driver's ``Searcher``, as an API replica there: the text embedded
on the head, then every shard searched), the plan is made for them, and each mode reports its
searches' p50 (from when each was due to its last shard's answer) beside the simulation's.

Run:  sudo .venv/bin/python benchmarks/plan.py [--quick] [--weak-cores 0.3] [--queries-per-s 2]
It ends with one line of JSON holding every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BED_PHOTOS as PHOTOS  # noqa: E402
from _common import Cgroups, cpu_seconds, ns_pids, run_benchmark  # noqa: E402

RATES = ("1gbit", "20mbit", "1gbit")  # each host's link, both ways (--slow-rate: host 1's)
CORES = (0.7, 0.7, 0.15)  # cores each host may use (its cgroup); Ray is told 2 CPUs each
DELAY_MS = 10.0
CRF = 0  # x264 lossless: about 3.6 Mbit/s at 320x240
# torch_threads 0: the default, one thread per core the host's quota allows (one on every
# host here). The calibration here, outside any quota, is told the same one thread.
CFG = {"speech": False, "screen_text": False, "num_shards": 2, "torch_threads": 0}


def drive(spec: dict) -> None:
    """In host 0: index the videos with the plan written in the data dir; print the figures."""
    import ray

    from vifusion.config import Config
    from vifusion.runtime import Runtime

    ray.init(address=spec["address"], log_to_driver=False)
    cfg = Config(
        data_dir=Path(spec["data"]),
        ray_address=spec["address"],
        sample_fps=spec["sample_fps"],
        **{**CFG, "torch_threads": spec["torch_threads"]},
    )
    per_s = spec.get("queries_per_s", 0.0)
    with Runtime(cfg, writer=True) as rt:
        ray.get([e.device.remote() for e in rt.indexer.extractors])  # models loaded
        threads = ray.get(
            [e.__ray_call__.remote(lambda _: _torch_threads()) for e in rt.indexer.extractors]
        )
        if per_s:
            rt.searcher.text("warm up", modalities=("visual",))  # its model loaded
        _mark("LOADED")  # the caller reads the hosts' CPU counters (outside this netns)
        searches = _Searches(rt.searcher, per_s) if per_s else None
        t0 = time.perf_counter()
        results = rt.indexer.index_files([Path(f) for f in spec["videos"]])
        wall = time.perf_counter() - t0
        latencies = searches.stop() if searches else []
        _mark("INDEXED")
        extractors = len(rt.indexer.extractors)
    frames = sum(r.frames for r in results if r.status == "ready")
    print(
        "RESULT "
        + json.dumps(
            {
                "videos_ready": sum(r.status == "ready" for r in results),
                "frames": frames,
                "seconds": wall,
                "frames_per_s": frames / wall,
                "extractors": extractors,
                "torch_threads": threads,
                "searches": len(latencies),
                "query_p50_s": sorted(latencies)[len(latencies) // 2] if latencies else 0.0,
            }
        ),
        flush=True,
    )


_TEXTS = ("a cup of coffee", "a rocket on the launch pad", "an astronaut", "moving shapes")


class _Searches:
    """Text searches at random (Poisson) times while the ingest runs, as users would send
    them to an API replica on the head: each on a thread of its own, so that one slow
    search does not hold the next back; its time runs from when it was due."""

    def __init__(self, searcher, per_s: float) -> None:
        import random
        import threading
        from concurrent.futures import ThreadPoolExecutor

        self.latencies: list[float] = []
        self._pool = ThreadPoolExecutor(16)
        self._done = threading.Event()
        self._searcher, self._rng = searcher, random.Random(1)
        self._thread = threading.Thread(target=self._send, args=(per_s,), daemon=True)
        self._thread.start()

    def _send(self, per_s: float) -> None:
        due, n = time.perf_counter(), 0
        while not self._done.is_set():
            due += self._rng.expovariate(per_s)
            self._done.wait(max(due - time.perf_counter(), 0.0))
            if not self._done.is_set():
                self._pool.submit(self._one, _TEXTS[n % len(_TEXTS)], due)
                n += 1

    def _one(self, text: str, due: float) -> None:
        self._searcher.text(text, modalities=("visual",))
        self.latencies.append(time.perf_counter() - due)

    def stop(self) -> list[float]:
        self._done.set()
        self._thread.join()
        self._pool.shutdown(wait=True)
        return self.latencies


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def _mark(what: str) -> None:
    """Say ``what`` to the caller and wait for its go-ahead (a line on stdin)."""
    print(what, flush=True)
    sys.stdin.readline()


def _cpu_snapshot(dirs: list[Path]) -> list[dict]:
    """Per host (cgroup): each process's CPU seconds so far, by pid, with its name (a Ray
    worker's is its actor class), and the cgroup's throttled time."""
    out = []
    for d in dirs:
        procs: dict[int, tuple[str, float]] = {}
        for pid in (d / "cgroup.procs").read_text().split():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                procs[int(pid)] = (_proc_name(argv), cpu_seconds(pid))
            except OSError:
                continue
        throttled = dict(line.split() for line in (d / "cpu.stat").read_text().splitlines())
        out.append({"procs": procs, "throttled_s": int(throttled.get("throttled_time", 0)) / 1e9})
    return out


def _proc_name(argv: list[bytes]) -> str:
    first = argv[0].decode(errors="replace")
    if first.startswith("ray::"):
        return first.split()[0].split(".")[0]
    for a in argv[1:]:
        a = a.decode(errors="replace")
        if a.endswith(".py"):
            return Path(a).name
    return Path(first.split()[0]).name if first else "?"


def _cpu_used(before: list[dict], after: list[dict]) -> list[dict]:
    """CPU seconds per process name per host between two snapshots, and time throttled."""
    out = []
    for b, a in zip(before, after, strict=True):
        names: dict[str, float] = {}
        for pid, (name, cpu) in a["procs"].items():
            used = cpu - b["procs"].get(pid, (name, 0.0))[1]
            names[name] = round(names.get(name, 0.0) + used, 2)
        out.append(
            {
                "by_process": dict(sorted(names.items(), key=lambda kv: -kv[1])),
                "total_s": round(sum(names.values()), 2),
                "throttled_s": round(a["throttled_s"] - b["throttled_s"], 2),
            }
        )
    return out


def sixteen_nodes():
    from vifusion.plan.hardware import Cluster, NodeType

    return Cluster(
        (
            NodeType("head", 1, 4, memory_bytes=16 << 30),
            NodeType("gpu", 4, 4, gpus=1, memory_bytes=16 << 30),
            NodeType(
                "mem", 8, 8, memory_bytes=64 << 30, uplink=20e6 / 8, downlink=20e6 / 8, rtt_s=0.01
            ),
            NodeType("small", 3, 2, memory_bytes=8 << 30, cpu_share=0.5),
        ),
        "head",
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer, shorter videos")
    ap.add_argument(
        "--torch-threads",
        type=int,
        default=CFG["torch_threads"],
        help="an extractor's torch threads (0: one per core its host's quota allows)",
    )
    ap.add_argument("--slow-rate", default=RATES[1], help="host 1's link, both ways (20mbit)")
    ap.add_argument(
        "--weak-cores", type=float, default=CORES[2], help="host 2's CPU quota in cores (0.15)"
    )
    ap.add_argument(
        "--queries-per-s",
        type=float,
        default=0.0,
        help="text searches a second, sent on the head while each mode indexes; planned for",
    )
    ap.add_argument("--drive", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.drive:
        drive(json.loads(args.drive))
        return 0

    from _common import machine

    from deploy.netbed import NetBed, available
    from vifusion.config import Config
    from vifusion.plan.calibrate import _here
    from vifusion.plan.hardware import Cluster, Node, NodeType
    from vifusion.plan.placement_search import Evaluated, even_spread, search_placements
    from vifusion.plan.planner import plan_document, workload
    from vifusion.plan.simulate import simulate
    from vifusion.plan.terms import Workload
    from vifusion.runtime import RAY_TUNED
    from vifusion.samples import write_video

    rates = (RATES[0], args.slow_rate, RATES[2])
    quotas = (*CORES[:2], args.weak_cores)
    if (reason := available()) is not None:
        print(f"plan benchmark needs the network test bed: {reason}", file=sys.stderr)
        return 2
    count, scene_s, fps = (8, 2.0, 4.0) if args.quick else (12, 4.0, 4.0)
    work = Path(tempfile.mkdtemp(prefix="vf-plan-bench-"))
    groups = None
    phases: dict[str, float] = {}  # wall seconds of each step, to see where a run goes
    mark = [time.perf_counter()]

    def phase(name: str) -> None:
        now = time.perf_counter()
        phases[name] = round(now - mark[0], 1)
        mark[0] = now
        print(f"  [{name}: {phases[name]} s]", flush=True)

    try:
        videos = [
            write_video(
                work / f"v{i}.mp4",
                (PHOTOS[i % len(PHOTOS)], PHOTOS[(i + 3) % len(PHOTOS)], "motion"),
                scene_s=scene_s,
                crf=CRF,
            ).path
            for i in range(count)
        ]
        video_bytes = sum(v.stat().st_size for v in videos) / count
        video_mbps = video_bytes * 8 / (3 * scene_s) / 1e6
        print(f"  {count} videos of {3 * scene_s:.0f} s at {video_mbps:.2f} Mbit/s", flush=True)
        cfg = Config(
            data_dir=work / "calibration",
            sample_fps=fps,
            plan_video_mbps=round(video_mbps, 2),  # decoding is calibrated at this bitrate
            **{**CFG, "torch_threads": args.torch_threads or 1},
        )
        phase("videos")
        costs_here = _here(cfg)
        print(f"  calibrated here: {costs_here}", flush=True)
        phase("calibrate_here")

        # The 16-node cluster: how long the search takes, how much it prunes. Its nodes have
        # whole cores, so their extractors take torch's default (a thread a core).
        big = sixteen_nodes()
        big_costs = {t.name: replace(costs_here, embed_threads=0) for t in big.types}
        big_report = search_placements(
            big,
            big_costs,
            Workload(0, round(600 * fps), steady=True),
            num_shards=2,
            parallel=False,
        )
        # The same with the files `vifusion plan` counts by default (4 Mbit/s videos).
        big_files = search_placements(
            big,
            big_costs,
            workload(cfg.updated({"plan_video_mbps": 4.0})),
            num_shards=2,
            parallel=False,
        )
        phase("search_16_nodes")

        with NetBed(hosts=3, rate=RATES[0], delay_ms=DELAY_MS, cgroups=True) as bed:
            for i, rate in enumerate(rates):
                bed.set_rate(i, rate)
                if _bps(rate) < 1e9:
                    bed.set_downlink(i, rate)
            groups = Cgroups(bed.bed, quotas)
            address = bed.start_ray(num_cpus=2, env=RAY_TUNED)
            for i, host in enumerate(bed.hosts):
                groups.move(i, ns_pids(host.name))
            phase("bed_and_ray")

            def described(cores: list[float]) -> Cluster:
                """The bed as the planner sees it: each host's cores as probed just now."""
                return Cluster(
                    tuple(
                        NodeType(
                            f"h{i}",
                            1,
                            2,
                            cpu_share=c / 2,
                            uplink=_bps(r) / 8,
                            downlink=_bps(r) / 8,
                            rtt_s=2 * DELAY_MS / 1e3,
                        )
                        for i, (r, c) in enumerate(zip(rates, cores, strict=True))
                    ),
                    "h0",
                )

            probed = groups.probe()
            print(f"  cores the hosts get now: {probed} (quotas {quotas})", flush=True)
            cluster = described(probed)
            types = cluster.types
            # The hosts share this machine's cores: a frame embedded on one while the others
            # embed costs more than alone (each host is measured in its cgroup, all at once).
            on_hosts = groups.embed_cs(cfg)
            print(f"  embed_cs on the hosts at once: {on_hosts}", flush=True)
            phase("calibrate_on_hosts")
            costs = {t.name: _as_measured(costs_here, e) for t, e in zip(types, on_hosts)}
            live = [Node(t, 0, bed.hosts[i].ip) for i, t in enumerate(types)]
            # Planned for this batch (`vifusion plan --batch`): with a few videos, which
            # extractor gets the last one matters as much as the steady rate (an extractor
            # on the weak host holds it up).
            # Searches, where sent, are over the shards as they fill: half the batch's rows
            # on average.
            finite = workload(
                cfg.updated(
                    {
                        "plan_batch_videos": count,
                        "plan_video_s": 3 * scene_s,
                        "plan_queries_per_s": args.queries_per_s,
                        "plan_index_rows": max(1, round(count * 3 * scene_s * fps / 2)),
                    }
                )
            )
            t0 = time.perf_counter()
            report = search_placements(cluster, costs, finite, num_shards=2, parallel=False)
            bed_search_s = time.perf_counter() - t0
            modes = {"plan": report.best.candidate, "even": even_spread(cluster, 2, 1)}
            res = {}
            for mode, candidate in modes.items():
                predicted = simulate(described(probed), costs, candidate, finite)
                data = work / f"data-{mode}"
                data.mkdir(parents=True)
                doc = plan_document(cluster, Evaluated(candidate, predicted), live)
                (data / "plan.json").write_text(json.dumps(doc))
                spec = {
                    "address": address,
                    "videos": [str(v) for v in videos],
                    "data": str(data),
                    "sample_fps": fps,
                    "torch_threads": args.torch_threads,
                    "queries_per_s": args.queries_per_s,
                }
                groups.loose()  # the models load; the ingest runs tight
                proc = bed.exec(
                    0,
                    [sys.executable, __file__, "--drive", json.dumps(spec)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=(errors := tempfile.TemporaryFile("w+")),
                    text=True,
                    cwd=str(ROOT),
                    env={**os.environ, "PYTHONPATH": str(ROOT)},
                )
                groups.move(0, {proc.pid})
                result, snaps = None, []
                for line in proc.stdout:
                    if line.strip() == "LOADED":
                        # Predicted from the cores each host gets now, with the runtime's
                        # actors up (idle, as Ray's daemons are): what the ingest will share.
                        phase(f"{mode}_start")
                        groups.tight()
                        probed = groups.probe()
                        predicted = simulate(described(probed), costs, candidate, finite)
                    if line.strip() in ("LOADED", "INDEXED"):
                        snaps.append(_cpu_snapshot(groups.dirs))
                        if line.strip() == "INDEXED":
                            groups.loose()  # the runtime shuts down
                        proc.stdin.write("\n")
                        proc.stdin.flush()
                    elif line.startswith("RESULT "):
                        result = line[7:]
                proc.wait(timeout=120)
                phase(f"{mode}_ingest")
                if result is None or len(snaps) != 2:
                    errors.seek(0)
                    raise RuntimeError(f"the driver failed ({mode}):\n{errors.read()[-3000:]}")
                res[mode] = json.loads(result) | {
                    "cpu_s": _cpu_used(*snaps),
                    "predicted_fps": round(predicted.fps, 2),
                    "predicted_s": round(predicted.seconds, 2),
                    "predicted_query_p50_s": round(predicted.query_p50_s, 4),
                    "cores_probed": probed,
                    "predicted_cpu_s": [
                        {k: round(v, 2) for k, v in node.items()} for node in predicted.cpu_s
                    ],
                    "placement": {
                        "extractors": list(candidate.extractors),
                        "shards": [list(g) for g in candidate.shards],
                    },
                }
        for mode, r in res.items():
            print(
                f"  {mode:>4}: {r['frames']} frames of {r['videos_ready']} videos in {r['seconds']:.1f} s = "
                f"{r['frames_per_s']:.1f} frames/s (predicted {r['predicted_fps']:.1f}); {r['placement']}",
                flush=True,
            )
            if r["searches"]:
                print(
                    f"    {r['searches']} searches: p50 {r['query_p50_s'] * 1e3:.0f} ms "
                    f"(predicted {r['predicted_query_p50_s'] * 1e3:.0f} ms)",
                    flush=True,
                )
            for host, (used, model) in enumerate(zip(r["cpu_s"], r["predicted_cpu_s"])):
                print(f"    h{host}: measured {used}\n        predicted {model}", flush=True)
        plan, even = res["plan"], res["even"]
        out = {
            "benchmark": "plan",
            "quick": args.quick,
            "machine": machine(),
            "date": time.strftime("%Y-%m-%d"),
            "bed": {"rates": rates, "both_ways": True, "delay_ms": DELAY_MS, "cores": quotas},
            "videos": count,
            "video_mbps": round(video_mbps, 2),
            "sample_fps": fps,
            "torch_threads": args.torch_threads,
            "calibrated": {k: v for k, v in vars(costs_here).items() if k.endswith(("_cs", "_s"))},
            "embed_cs_on_hosts": on_hosts,
            "predicted_fps": plan["predicted_fps"],
            "measured_fps": round(plan["frames_per_s"], 2),
            "plan_error": round(
                abs(plan["predicted_fps"] - plan["frames_per_s"]) / plan["frames_per_s"], 3
            ),
            "even_predicted_fps": even["predicted_fps"],
            "even_measured_fps": round(even["frames_per_s"], 2),
            "chosen_over_even": round(plan["frames_per_s"] / even["frames_per_s"], 3),
            "queries_per_s": args.queries_per_s,
            "query_p50_s": round(plan["query_p50_s"], 4),
            "predicted_query_p50_s": plan["predicted_query_p50_s"],
            "even_query_p50_s": round(even["query_p50_s"], 4),
            "even_predicted_query_p50_s": even["predicted_query_p50_s"],
            "bed_search_s": round(bed_search_s, 3),
            "search_s": round(big_report.seconds, 3),
            "candidates_evaluated": big_report.evaluated,
            "candidates_pruned": big_report.pruned,
            "candidates": big_report.candidates,
            "search_s_files": round(big_files.seconds, 3),
            "candidates_evaluated_files": big_files.evaluated,
            "phases_s": phases,
            "modes": res,
        }
        print(json.dumps(out))
    finally:
        if groups is not None:
            groups.remove()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _as_measured(here, embed_cs: float):
    """The costs calibrated here, scaled to a host's embedding cost as measured on the bed
    (decoding and the crowded cost by the same factor: the same cores are shared)."""
    scale = embed_cs / here.embed_cs
    return replace(
        here,
        decode_cs=here.decode_cs * scale,
        embed_cs=embed_cs,
        embed_cs_crowded=here.embed_cs_crowded * scale,
        query_cs=here.query_cs * scale,  # a query's text is embedded by torch too
    )


def _bps(rate: str) -> float:
    from vifusion.plan.hardware import rate_bps

    return rate_bps(rate)


if __name__ == "__main__":
    run_benchmark(main, "plan benchmark")
