"""Incast: four extract hosts send into one shard host through one shaped bottleneck, with
a node aggregator per host against every extractor sending its own batches (issue 37).

Test bed (``deploy/netbed.py``, needs root): hosts 0-3 extract, host 4 holds a real shard
replica (as in ``benchmarks/fusion.py``: write-ahead log fsynced before each
acknowledgement, flat FAISS index). Every host's uplink is 1 Gbit (plain veth, no delay);
the bridge's port into the shard host is shaped to ``--rate`` (100 Mbit, ``tc tbf`` as the
bed shapes uplinks), so the four hosts' traffic converges on one bottleneck.

Each extract host runs ``--extractors`` replayers (2), each producing the fusion
benchmark's real rows (``make_rows``, each replayer its own stretch of them) as fast as its
sender takes them:

- ``direct``: every extractor sends its own batches to the shard, 10 frames or 10 ms, 8 in
  flight (policy (2) of ``fusion.py``, Ray Serve's default batching);
- ``aggregators``: every extractor hands its rows to its host's node aggregator
  (``vifusion.fusion``, through its local socket), which sends one fused stream to the
  shard. Compression off (``compression="off"``) on both sides, so both move the same fp32
  bytes and the comparison is the aggregation alone;
- ``adaptive``: the same with ViFusion's adaptive compression on (tables trained on the
  fusion benchmark's training rows; the ladder uses only codecs that keep recall@10 0.99
  on held-out rows). Its recall is not measured here: ``fusion.py`` measures each codec's.

Figures per mode: frames/s stored by the shard over the run (its vector count, polled),
p50 latency from production to acknowledged (direct: over every batch; aggregators: the
median of the four aggregators' p50s), and the messages the shard handled (its log
records: one per batch) and per second. Modes alternate for ``--rounds`` rounds (2;
``--quick`` 1, 5 s); ``incast_fps_ratio`` (aggregators / direct frames/s, aim >= 1.5) is the
median of the rounds', ``incast_fps_ratio_adaptive`` the same for ``adaptive``.

Every host shares this machine's cores: the extract hosts' replayers and aggregators, the
shard, five Ray nodes and the bridge all run on them.

Run:  sudo .venv/bin/python benchmarks/incast.py [--quick]
It ends with one line of JSON holding every figure.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import arguments, drive_in_bed, emit_result, report_head, run_benchmark
from fusion import POLICIES, SHARD_CFG, Replayer, real_rows

from vifusion.comm import Ladder, SharedTables
from vifusion.comm.codec import recall_at_k
from vifusion.runtime import RAY_TUNED

EXTRACT_HOSTS = 4
SHARD_HOST = EXTRACT_HOSTS  # host 4
SPAN = 10_000_000  # rows apart: each extractor replays its own stretch (distinct ids)
MODES = ("direct", "aggregators", "adaptive")


def drive(spec: dict) -> None:
    """Inside host 0: each mode's run, printed as one RESULT line."""
    import ray

    from vifusion.comm import SharedTables
    from vifusion.config import Config
    from vifusion.fusion import Aggregator
    from vifusion.index.replica import ShardReplica

    ray.init(address=spec["address"], log_to_driver=False)
    tables = SharedTables.load(Path(spec["tables"]))
    data = np.load(spec["features"])
    pool, next_row = data["pool"], data["next_row"]
    per_host, duration = spec["extractors"], spec["duration"]
    p = POLICIES["2"]
    results = {}
    for run in spec["runs"]:
        mode = run.split("#")[0]
        work = Path(tempfile.mkdtemp(prefix=f"vf-incast-{mode}-"))
        compression = "adaptive" if mode == "adaptive" else "off"
        cfg = Config(data_dir=work, **SHARD_CFG, compression=compression)
        shard = (
            ray.remote(ShardReplica)
            .options(resources={f"host{SHARD_HOST}": 1})
            .remote(0, work / "shard", cfg, [])
        )
        hosts = [h for h in range(EXTRACT_HOSTS) for _ in range(per_host)]
        replayers = [
            ray.remote(Replayer)
            .options(resources={f"host{h}": 1}, num_cpus=0)
            .remote(pool, next_row)
            for h in hosts
        ]
        given = (tables, spec["quality"]) if mode == "adaptive" else ()
        aggs = (
            [
                ray.remote(Aggregator)
                .options(resources={f"host{h}": 1}, num_cpus=0, max_concurrency=16)
                .remote(cfg, [shard], *given)
                for h in range(EXTRACT_HOSTS)
            ]
            if mode != "direct"
            else []
        )
        ray.get(
            [
                shard.stats.remote(),
                *(r.__ray_ready__.remote() for r in replayers),
                *(a.stats.remote() for a in aggs),
            ]
        )
        samples: list[tuple[float, int, int]] = []  # (t, frames stored, log records)
        stop = threading.Event()

        def watch(stop=stop, shard=shard, samples=samples) -> None:  # this round's
            while not stop.is_set():
                s = ray.get(shard.stats.remote())
                samples.append((time.time(), s["vectors"]["visual"], s["seq"]))
                stop.wait(0.2)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        t0 = time.time()
        if aggs:
            calls = [
                r.run_vifusion.remote(aggs[h], duration, None, True, offset=k * SPAN)
                for k, (r, h) in enumerate(zip(replayers, hosts, strict=True))
            ]
        else:
            calls = [
                r.run_fixed.remote(
                    shard, p["rows"], p["age"], p["window"], duration, offset=k * SPAN
                )
                for k, r in enumerate(replayers)
            ]
        outs = ray.get(calls)
        stop.set()
        watcher.join()
        frames, records = (_at(samples, t0 + duration, i) - _at(samples, t0, i) for i in (1, 2))
        codecs: dict[str, int] = {}
        if aggs:
            stats = ray.get([a.stats.remote() for a in aggs])
            p50 = float(np.median([st["latency_p50_s"] for st in stats]))
            for st in stats:
                for c, n in st["codec_rows"].items():
                    codecs[c] = codecs.get(c, 0) + n
        else:
            p50 = float(np.median(np.concatenate([o["latency"] for o in outs])))
            codecs = {"fp32": sum(o["made"] for o in outs)}
        results[run] = {
            "frames_per_s": frames / duration,
            "latency_p50_ms": 1000 * p50,
            "messages": records,
            "messages_per_s": records / duration,
            "frames_per_message": frames / max(records, 1),
            "codec_rows": codecs,
        }
        for actor in (shard, *replayers, *aggs):
            ray.kill(actor)
        shutil.rmtree(work, ignore_errors=True)
    emit_result(results)


def _at(samples: list[tuple[float, int, int]], t: float, i: int) -> int:
    """Field ``i`` of the last sample at or before ``t`` (the first sample if none)."""
    before = [s[i] for s in samples if s[0] <= t]
    return before[-1] if before else samples[0][i]


def main() -> int:
    ap = arguments(__doc__, quick="one round of 5 s per mode", drive=True)
    ap.add_argument(
        "--rounds", type=int, help="rounds of both modes, alternating (default 2; --quick 1)"
    )
    ap.add_argument(
        "--rate", default="100mbit", help="the bottleneck into the shard host (default %(default)s)"
    )
    ap.add_argument(
        "--extractors",
        type=int,
        default=2,
        help="extractors per extract host (default %(default)s)",
    )
    args = ap.parse_args()
    if args.drive:
        drive(json.loads(args.drive))
        return 0

    from deploy.netbed import NetBed, available

    if (reason := available(delay=False)) is not None:
        print(f"incast benchmark needs the network test bed: {reason}", file=sys.stderr)
        return 2
    rounds = args.rounds or (1 if args.quick else 2)
    duration = 5.0 if args.quick else 10.0
    runs = [m if k == 1 else f"{m}#{k}" for k in range(1, rounds + 1) for m in MODES]
    work = Path(tempfile.mkdtemp(prefix="vf-incast-bench-"))
    try:
        r = real_rows()
        np.savez(work / "features.npz", pool=r["pool"], next_row=r["next_row"])
        tables = SharedTables.train(r["train"])  # as fusion.py trains them
        quality = recall_at_k(Ladder(tables), r["held_out"])
        with NetBed(hosts=EXTRACT_HOSTS + 1, rate="1gbit", delay_ms=0) as bed:
            _bottleneck(bed, args.rate)
            address = bed.start_ray(num_cpus=2, env=RAY_TUNED)
            spec = {
                "address": address,
                "features": str(work / "features.npz"),
                "runs": runs,
                "duration": duration,
                "extractors": args.extractors,
                "tables": str(tables.save(work)),
                "quality": quality,
            }
            print(
                f"== {EXTRACT_HOSTS} hosts x {args.extractors} extractors -> 1 shard host through "
                f"{args.rate}: {', '.join(runs)}, {duration:.0f} s each",
                flush=True,
            )
            modes = drive_in_bed(bed, spec, timeout=900, failed="the driver failed")
        for run, m in modes.items():
            print(
                f"  {run:14s} {m['frames_per_s']:8.0f} frames/s  p50 {m['latency_p50_ms']:8.1f} ms  "
                f"{m['messages']:6d} messages to the shard ({m['messages_per_s']:.0f}/s, "
                f"{m['frames_per_message']:.0f} frames each)  codecs {m['codec_rows']}",
                flush=True,
            )
        ratios = {}
        for mode, key in (
            ("aggregators", "incast_fps_ratio"),
            ("adaptive", "incast_fps_ratio_adaptive"),
        ):
            per_round = [
                modes[f"{mode}{s}"]["frames_per_s"] / modes[f"direct{s}"]["frames_per_s"]
                for s in ["", *(f"#{k}" for k in range(2, rounds + 1))]
                if modes[f"direct{s}"]["frames_per_s"]
            ]
            ratios[key] = round(float(np.median(per_round)), 3) if per_round else None
            ratios[f"{key}_rounds"] = [round(x, 3) for x in per_round]
        report = report_head("incast", args.quick) | {
            "rate": args.rate,
            "extract_hosts": EXTRACT_HOSTS,
            "extractors_per_host": args.extractors,
            "tables_quality": quality,
            "modes": modes,
            "ratios": ratios,
        }
        print("ratios:", report["ratios"])
        print(json.dumps(report))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _bottleneck(bed, rate: str) -> None:
    """Shape the bridge's port into the shard host: every extract host's traffic to it
    shares this one queue (the hosts' own uplinks stay at the bed's 1 Gbit)."""
    from deploy.netbed import _rate_bps

    burst = max(64 * 1024, 2 * bed.mtu, int(_rate_bps(rate) / 8 * 0.002))  # as the bed's uplinks
    subprocess.run(
        [
            "tc",
            "-n",
            f"{bed.bed}-sw",
            "qdisc",
            "replace",
            "dev",
            f"h{SHARD_HOST}",
            "root",
            "tbf",
            "rate",
            rate,
            "burst",
            str(burst),
            "latency",
            "50ms",
        ],
        check=True,
    )


if __name__ == "__main__":
    run_benchmark(main, "incast benchmark")
