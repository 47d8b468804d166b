"""A bounded soak on loopback: many short videos ingested while a closed-loop search load runs.

The real service (Ray Serve app on a local Ray, the REST API over HTTP): one client uploads
every video (each upload queues a job) and waits for them, while ``--clients`` others search
back to back, each sending its next query when the last one answered. Reports: requests and
error responses (anything but 200/202), search latency p50/p99, videos ready/failed, and the
resident memory of every Ray actor process at the start (service up, nothing ingested) and
at the end. The per-key rate limit is lifted: this measures the service, not the limiter.

Run:  .venv/bin/python benchmarks/soak.py [--quick]
It ends with one line of JSON holding every figure.
"""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import arguments, descendants, report_head, run_benchmark

from vifusion.config import Config
from vifusion.samples import PHOTOS, write_video

QUERIES = [
    "a cat",
    "a rocket",
    "a cup of coffee",
    "a motorcycle",
    "the night sky",
    "coins on a table",
]


def actor_rss_mb() -> dict[str, float]:
    """Resident memory of each Ray worker process of this script's cluster, by process title."""
    out: dict[str, float] = {}
    for pid in descendants():
        try:
            title = (
                Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            )
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if not title.startswith("ray::") or "IDLE" in title:
            continue
        rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS"))
        name = title.split()[0].split(".")[0]  # ray::Class(.method) -> ray::Class
        out[f"{name}#{pid}"] = rss / 1024
    return out


def main() -> int:
    ap = arguments(__doc__, quick="8 videos, 30 s of load (about a minute and a half)")
    ap.add_argument("--clients", type=int, default=4)
    args = ap.parse_args()
    count, load_s = (8, 30.0) if args.quick else (40, 180.0)

    import ray

    from serve.app import deploy
    from vifusion.client import ApiError, Client

    tmp = Path(tempfile.mkdtemp(prefix="vifusion-soak-"))
    names = list(PHOTOS)
    videos = [
        write_video(
            tmp / "videos" / f"v{i}.mp4",
            (names[i % len(names)], names[(i + 5) % len(names)]),
            scene_s=2.0,
        ).path
        for i in range(count)
    ]
    key = secrets.token_urlsafe(24)
    cfg = Config(data_dir=tmp / "data", api_key=key, rate_limit_rps=1e6, rate_limit_burst=1_000_000)
    # address="local": a cluster of its own, even where another Ray runs (its processes are ours to measure)
    ray.init(
        address="local",
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    codes: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    latencies: list[float] = []
    lock = threading.Lock()
    try:
        from ray import serve

        port = 18000 + secrets.randbelow(2000)
        url = f"http://127.0.0.1:{port}"
        deploy(cfg, "127.0.0.1", port)
        with Client(url, key, trust_env=False) as vf:
            vf.search("warm up")
        rss_start = actor_rss_mb()
        stop = threading.Event()
        ingest_done: dict[str, int] = {}

        def tally(kind: str, code: int) -> None:
            with lock:
                codes[kind][code] += 1

        def call(kind: str, ok: int, fn, *args, **kwargs):
            """``fn(...)``, its status tallied under ``kind``; None where the API refused it."""
            try:
                out = fn(*args, **kwargs)
            except ApiError as e:
                tally(kind, e.status)
                return None
            tally(kind, ok)
            return out

        def ingest() -> None:
            with Client(url, key, trust_env=False) as vf:
                jobs = [
                    a["job_id"] for path in videos if (a := call("upload", 202, vf.upload, path))
                ]
                final: dict[str, str] = {}
                while len(final) < len(jobs):
                    for job_id in jobs:
                        if job_id not in final and (job := call("job", 200, vf.job, job_id)):
                            if job["status"] in ("ready", "failed"):
                                final[job_id] = job["status"]
                    time.sleep(0.5)
            ingest_done.update({s: list(final.values()).count(s) for s in ("ready", "failed")})

        def search(n: int) -> None:
            with Client(url, key, trust_env=False) as vf:
                i = n
                while not stop.is_set():
                    t0 = time.perf_counter()
                    call("search", 200, vf.search, QUERIES[i % len(QUERIES)], top_k=5)
                    with lock:
                        latencies.append(time.perf_counter() - t0)
                    i += 1

        t0 = time.perf_counter()
        ingester = threading.Thread(target=ingest)
        searchers = [threading.Thread(target=search, args=(n,)) for n in range(args.clients)]
        for t in [ingester, *searchers]:
            t.start()
        ingester.join()
        ingest_s = time.perf_counter() - t0
        stop.wait(max(load_s - ingest_s, 0))
        stop.set()
        for t in searchers:
            t.join()
        elapsed = time.perf_counter() - t0
        rss_end = actor_rss_mb()
        serve.shutdown()
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)

    lat = np.array(latencies) if latencies else np.zeros(1)
    errors = sum(n for kind in codes.values() for code, n in kind.items() if code not in (200, 202))
    both = sorted(set(rss_start) & set(rss_end))
    rss = {
        k: {
            "start_mb": round(rss_start[k], 1) if k in rss_start else None,
            "end_mb": round(rss_end[k], 1) if k in rss_end else None,
        }
        for k in sorted(set(rss_start) | set(rss_end))
    }  # actors started on the first job: no start figure
    report = report_head("soak", args.quick) | {
        "videos": count,
        "clients": args.clients,
        "seconds": round(elapsed, 1),
        "ingest_s": round(ingest_s, 1),
        "requests": {k: dict(v) for k, v in codes.items()},
        "errors": errors,
        "ingest": ingest_done,
        "searches": len(latencies),
        "search_p50_ms": round(1000 * float(np.percentile(lat, 50)), 1),
        "search_p99_ms": round(1000 * float(np.percentile(lat, 99)), 1),
        "rss": rss,
        "rss_growth_max": round(max((rss_end[k] / rss_start[k] for k in both), default=1.0), 3),
    }
    print(
        f"{count} videos ingested in {ingest_s:.1f} s ({ingest_done}) under {args.clients} searching clients; "
        f"{len(latencies)} searches, p50 {report['search_p50_ms']} ms, p99 {report['search_p99_ms']} ms; "
        f"{errors} error responses"
    )
    for k, v in rss.items():
        print(f"  {k:48} {v['start_mb'] or 0:8.1f} MB -> {v['end_mb'] or 0:8.1f} MB")
    print(json.dumps(report))
    return 0 if errors == 0 else 1


if __name__ == "__main__":
    run_benchmark(main, "soak benchmark")
