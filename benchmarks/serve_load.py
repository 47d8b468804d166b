"""Search through the HTTP service vs. the same searches in-process: QPS and latency under load.

One data set, two ways in, one run:

1. **HTTP**: the real app (``serve.app.deploy``: Ray Serve proxy + FastAPI replica) on
   127.0.0.1. The sample videos are ingested through the API itself (``POST /v1/videos``
   with ``file://`` uris, then ``GET /v1/jobs/{id}`` until ready). Then C client threads,
   each with its own keep-alive ``http.client`` connection, run a closed loop of
   ``POST /v1/search {"text": q, "top_k": 10}``; latency is measured in the client.
2. **In-process**: Serve is torn down (it holds the data dir's writer lock), the driver opens
   ``vifusion.service.Service(cfg)`` on the same data dir (new shard actors load the same
   snapshots) and C threads run the same loop calling what the search handler calls:
   ``service.search(text=q, top_k=10)`` (query embedding with ``cfg.query_threads`` torch
   threads, shard fan-out, merge, grouping, the ready-videos check) plus
   ``service.catalog.get_videos`` for the titles and the same result dicts. What HTTP adds
   is therefore the client, the proxy, Serve's routing, FastAPI (auth, rate limit, JSON
   parse / validation / serialisation) and the thread-pool hop inside the replica.

Same queries (a fixed list, cycled), same top_k, same concurrency levels, same request
count per client; HTTP runs first (its replica built the index), in-process second. Every level starts with a warm-up (a few requests per client, untimed)
and all clients start together; QPS = requests / wall time of the level. Every HTTP answer
must be 200 (others are counted and printed). The top hit of each query is compared
between the two modes (they must agree: same data, same code).

It prints the workload, a table (mode, clients, requests, QPS, p50, p99, errors, and CPU
ms per request: the CPU time of this process and every process it started, Ray's workers
included, over the level, less what the same processes burn idle (measured for 2 s before
each mode's levels), divided by its requests; on a shared host this moves less than QPS),
per concurrency the ratio HTTP QPS / in-process QPS and the CPU ratio, the aim line (>= 70%
at 4 clients) and last one line of JSON with every figure.

Run (from the repository root):

    .venv/bin/python benchmarks/serve_load.py           # 8 videos x 60 s; 1, 2, 4, 8 clients
    .venv/bin/python benchmarks/serve_load.py --quick   # the 3 demo videos; 1 and 4 clients
    .venv/bin/python benchmarks/serve_load.py --quick --env OMP_WAIT_POLICY=PASSIVE
        # --env: environment for every Ray process, to try a setting without editing code

The videos are written once into /tmp/vifusion-bench/serve_load/ (``--cache``) and reused;
the data dir is a temporary folder, removed at the end. Ray gets 4 logical CPUs (as the
tests do). Figures vary with other load on the host: this is a small, shared machine, and
the client threads, the proxy, the replica and the shard actors all share its cores.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import logging
import os
import secrets
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from _common import descendants, machine  # benchmarks/ is on sys.path when a script here runs

from vifusion.config import Config
from vifusion.samples import DEMO_SET, MOTION, PHOTOS, write_video

QUERIES = [
    "a cat",
    "a cup of coffee",
    "a rocket",
    "a motorcycle",
    "a person",
    "an astronaut",
    "a camera",
    "stars in the night sky",
    "coins",
    "a space shuttle",
    "an espresso",
    "a man with a camera",
]
TOP_K = 10
WARMUP_PER_CLIENT = 3
SIZE = (320, 240)  # (width, height) of the full run's videos
FPS = 24
SCENE_S = 10.0
SCENES = [*PHOTOS, MOTION]


@dataclass(frozen=True)
class Plan:
    quick: bool
    levels: tuple[int, ...]  # client counts
    per_client: int  # timed requests per client
    limit_s: float  # a level stops here even if the clients are not done


@dataclass
class Level:
    mode: str
    clients: int
    latencies: list[float] = field(default_factory=list)  # seconds, completed requests only
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float = 0.0  # CPU time of this process and every process it started (Ray's included)
    idle_cpu_rate: float = 0.0  # CPU seconds per second the same processes use with no requests
    cut: bool = False  # stopped by the time limit

    @property
    def cpu_ms_per_request(self) -> float:
        """CPU per request net of the idle rate (Ray's and Serve's background loops)."""
        if not self.requests:
            return float("nan")
        return max(0.0, self.cpu_s - self.idle_cpu_rate * self.wall_s) / self.requests * 1000

    @property
    def requests(self) -> int:
        return len(self.latencies)

    @property
    def qps(self) -> float:
        return self.requests / self.wall_s if self.wall_s else 0.0

    def pct_ms(self, q: float) -> float:
        return float(np.percentile(self.latencies, q)) * 1000 if self.latencies else float("nan")


# --------------------------------------------------------------------------- data set


def write_videos(cache: Path, quick: bool) -> list[Path]:
    """Quick: the 3 demo videos (12 s each). Full: 8 distinct videos x 60 s (scene orders
    differ, so none is skipped as a duplicate). Written aside then renamed, once."""
    if quick:
        folder = cache / "demo"
        specs = [
            (folder / name, list(photos), 4.0, 24, (320, 240)) for name, photos in DEMO_SET.items()
        ]
    else:
        folder = cache / f"{SIZE[0]}x{SIZE[1]}-{FPS}fps"
        per = 6
        specs = [
            (
                folder / f"video{v}-60s.mp4",
                [SCENES[(v * per + j) % len(SCENES)] for j in range(per)],
                SCENE_S,
                FPS,
                SIZE,
            )
            for v in range(8)
        ]
    for path, photos, scene_s, fps, size in specs:
        if not path.exists():
            print(f"writing {path} (once; reused by later runs)", flush=True)
            part = path.with_name(path.stem + ".part.mp4")
            write_video(part, photos, scene_s=scene_s, fps=fps, size=size)
            part.replace(path)
    return [s[0] for s in specs]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ingest(url: str, key: str, videos: list[Path], timeout_s: float) -> int:
    """Index every video as a file:// uri through the API and wait for each job (SystemExit if
    one is refused or fails); returns the frame vectors the service then holds."""
    from vifusion.client import ApiError, Client

    with Client(url, key, trust_env=False) as vf:
        jobs = {}
        for path in videos:
            try:
                jobs[path.name] = vf.add_uri(path.resolve().as_uri())["job_id"]
            except ApiError as e:
                raise SystemExit(f"ingest of {path} refused: {e}") from None
        deadline = time.monotonic() + timeout_s
        for name, job_id in jobs.items():
            try:
                job = vf.wait(job_id, timeout_s=max(0.0, deadline - time.monotonic()), poll_s=0.25)
            except TimeoutError as e:
                raise SystemExit(f"ingest of {name}: {e}") from None
            if job["status"] == "failed":
                raise SystemExit(f"ingest of {name} failed: {job.get('error')}")
        return vf.health()["vectors"]


# --------------------------------------------------------------------------- the load loop


def _tree_cpu_s() -> float:
    """utime + stime of this process and all its descendants (the local Ray cluster's
    processes are started by this one): the CPU the benchmark costs, whatever else the
    host runs. Processes that end inside a level are missed (none should)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in [os.getpid(), *descendants()]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def idle_cpu_rate(seconds: float = 2.0) -> float:
    """CPU seconds per second that this process tree burns while no request is in flight."""
    cpu0, t0 = _tree_cpu_s(), time.perf_counter()
    time.sleep(seconds)
    return (_tree_cpu_s() - cpu0) / (time.perf_counter() - t0)


def run_level(
    mode: str,
    clients: int,
    plan: Plan,
    make_call: Callable[[], Callable[[str], Any]],
    idle_rate: float,
) -> Level:
    """``clients`` threads; each makes its own ``call`` (e.g. an HTTP client), warms up, waits
    for the others, then sends ``plan.per_client`` queries back to back (closed loop), or
    fewer if the level runs past ``plan.limit_s``. ``call(q)`` raises on a failed request."""
    level = Level(mode, clients, idle_cpu_rate=idle_rate)
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)
    done = threading.Barrier(clients + 1)
    stop_at = [float("inf")]

    def client(i: int) -> None:
        lat: list[float] = []
        errs: list[str] = []
        made = call = None
        try:
            made = make_call()
            for j in range(WARMUP_PER_CLIENT):
                made(QUERIES[(i + j) % len(QUERIES)])
            call = made
        except Exception as e:  # noqa: BLE001 - reported, and the level still runs
            errs.append(f"warm-up: {type(e).__name__}: {e}"[:300])
        start.wait()
        try:
            for j in range(plan.per_client):
                if call is None or time.perf_counter() > stop_at[0]:
                    break
                q = QUERIES[(i * 5 + j) % len(QUERIES)]  # clients start at different queries
                t0 = time.perf_counter()
                try:
                    call(q)
                except Exception as e:  # noqa: BLE001
                    errs.append(f"{type(e).__name__}: {e}"[:300])
                    continue
                lat.append(time.perf_counter() - t0)
        finally:
            with lock:
                level.latencies += lat
                level.errors += errs
            close = getattr(made, "close", None)
            if close:
                close()
            done.wait()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    start.wait()  # every client has warmed up
    cpu0 = _tree_cpu_s()
    t0 = time.perf_counter()
    stop_at[0] = t0 + plan.limit_s
    done.wait()
    level.wall_s = time.perf_counter() - t0
    level.cpu_s = _tree_cpu_s() - cpu0
    level.cut = level.requests + len(level.errors) < clients * plan.per_client
    for t in threads:
        t.join()
    return level


class HttpCall:
    """One client's search call over its own keep-alive connection; non-200 raises.

    The standard library's ``http.client`` rather than httpx: on two cores the load
    generator shares the CPU with the service, so it should be as lean as it can be
    (about 0.3 ms of CPU a request, against about 1.6 ms for httpx)."""

    def __init__(self, url: str, key: str) -> None:
        import http.client
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def __call__(self, q: str) -> dict:
        self.conn.request(
            "POST", "/v1/search", body=json.dumps({"text": q, "top_k": TOP_K}), headers=self.headers
        )
        r = self.conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {body[:200]!r}")
        return json.loads(body)

    def close(self) -> None:
        self.conn.close()


def in_process_search(service) -> Callable[[str], dict]:
    """What the /v1/search handler does for a text query, minus HTTP and JSON."""
    from serve.app import moments

    def call(q: str) -> dict:
        page = service.search(
            text=q, top_k=TOP_K, group_by="segment", filter=None, min_score=None, offset=0
        )
        return {"results": moments(service, page), "next_cursor": page.next_offset}

    return call


def top_hits(call: Callable[[str], dict]) -> dict[str, tuple[int, float] | None]:
    """Each query's best result (video_id, start_s), to check both modes answer alike."""
    out = {}
    for q in QUERIES:
        res = call(q)["results"]
        out[q] = (res[0]["video_id"], res[0]["start_s"]) if res else None
    return out


# --------------------------------------------------------------------------- phases


def http_phase(
    cfg: Config, key: str, videos: list[Path], plan: Plan
) -> tuple[list[Level], dict, int]:
    """Deploy, ingest through the API, load it; leaves Serve running (the caller tears it down)."""
    from serve.app import deploy

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    deploy(cfg, "127.0.0.1", port)
    print(
        f"serve up in {time.perf_counter() - t0:.1f} s; ingesting {len(videos)} videos through the API",
        flush=True,
    )
    t0 = time.perf_counter()
    vectors = ingest(url, key, videos, timeout_s=600)
    print(f"ingested in {time.perf_counter() - t0:.1f} s: {vectors} frame vectors", flush=True)
    probe = HttpCall(url, key)
    try:
        hits = top_hits(probe)
    finally:
        probe.close()
    idle = idle_cpu_rate()
    levels = []
    for c in plan.levels:
        levels.append(run_level("http", c, plan, lambda: HttpCall(url, key), idle))
        print(f"  http        {c} clients: {levels[-1].qps:.1f} QPS", flush=True)
    return levels, hits, vectors


def open_service(cfg: Config, timeout_s: float = 60):
    """``Service(cfg)`` once the old replica has let go of the writer lock."""
    from vifusion.datadir import DataDirBusy
    from vifusion.service import Service

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return Service(cfg)
        except DataDirBusy:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def in_process_phase(cfg: Config, plan: Plan) -> tuple[list[Level], dict]:
    import torch

    torch.set_num_threads(cfg.query_threads)  # as the replica does (and Runtime.searcher)
    t0 = time.perf_counter()
    with open_service(cfg) as service:
        with contextlib.redirect_stdout(io.StringIO()):  # the weights loader prints
            service.searcher  # noqa: B018 - load the query model before timing, as the replica does
        print(f"in-process Service open in {time.perf_counter() - t0:.1f} s", flush=True)
        call = in_process_search(service)
        hits = top_hits(call)
        idle = idle_cpu_rate()
        levels = []
        for c in plan.levels:
            levels.append(run_level("in-process", c, plan, lambda: call, idle))
            print(f"  in-process  {c} clients: {levels[-1].qps:.1f} QPS", flush=True)
    return levels, hits


# --------------------------------------------------------------------------- report


def print_table(levels: list[Level]) -> None:
    print(
        f"{'mode':<12}{'clients':>8}{'requests':>10}{'QPS':>9}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}"
        f"{'CPU ms/req':>12}"
    )
    for lv in levels:
        cut = "  (time limit)" if lv.cut else ""
        print(
            f"{lv.mode:<12}{lv.clients:>8}{lv.requests:>10}{lv.qps:>9.1f}{lv.pct_ms(50):>9.1f}"
            f"{lv.pct_ms(99):>9.1f}{len(lv.errors):>8}{lv.cpu_ms_per_request:>12.1f}{cut}"
        )


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick", action="store_true", help="3 demo videos; 1 and 4 clients (about a minute)"
    )
    p.add_argument(
        "--requests", type=int, default=0, help="timed requests per client; 0: 30 quick, 100 full"
    )
    p.add_argument(
        "--cache", type=Path, default=Path("/tmp/vifusion-bench/serve_load"), help="video cache"
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment for every Ray process (set before Ray starts), e.g. a Serve setting "
        "such as RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD=0; repeatable",
    )
    p.add_argument(
        "--replicas",
        default="",
        metavar="N,M",
        help="instead of HTTP against in-process: the HTTP load with each number of API "
        "replicas (e.g. 1,2); last line JSON with qps_1_replica, qps_2_replicas",
    )
    args = p.parse_args()
    for item in args.env:
        if "=" not in item:
            p.error(f"--env {item!r}: expected NAME=VALUE")
    return args


def bench_config(videos: list[Path]) -> tuple[Path, str, Config]:
    """A temporary folder (the caller removes it), the API key and the service's Config."""
    tmp = Path(tempfile.mkdtemp(prefix="vifusion-serve-load-"))
    key = secrets.token_urlsafe(24)
    cfg = Config(
        data_dir=tmp / "data",
        api_key=key,
        ingest_roots=(videos[0].parent.resolve(),),
        rate_limit_rps=1e6,  # the benchmark must never be throttled
        rate_limit_burst=1_000_000,
    )
    return tmp, key, cfg


def replicas_phase(cfg: Config, key: str, videos: list[Path], plan: Plan, counts: list[int]):
    """The same HTTP load against the app with each count of API replicas (``api_replicas``,
    ``shared_actors``: every count serves the same shard replicas, indexed once, by the
    first). Returns (levels per count, vectors)."""
    from ray import serve

    from serve.app import APP_NAME, deploy

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    shared = cfg.updated({"shared_actors": True})
    out, vectors = {}, 0
    for n in counts:
        t0 = time.perf_counter()
        deploy(shared.updated({"api_replicas": n}), "127.0.0.1", port)
        print(f"{n} API replica(s) up in {time.perf_counter() - t0:.1f} s", flush=True)
        if not vectors:
            vectors = ingest(url, key, videos, timeout_s=600)
            print(f"ingested: {vectors} frame vectors", flush=True)
        idle = idle_cpu_rate()
        out[n] = []
        for c in plan.levels:
            out[n].append(run_level(f"http x{n}", c, plan, lambda: HttpCall(url, key), idle))
            print(f"  {n} replica(s), {c} clients: {out[n][-1].qps:.1f} QPS", flush=True)
        serve.delete(APP_NAME)  # the shards and the ingest pool stay up: they are shared
    return out, vectors


def replicas_main(args: argparse.Namespace) -> None:
    """``--replicas 1,2``: QPS and p50 at each concurrency per count of API replicas."""
    import ray

    counts = [int(n) for n in args.replicas.split(",")]
    plan = Plan(quick=args.quick, levels=(1, 4), per_client=args.requests or 60, limit_s=30.0)
    videos = write_videos(args.cache, args.quick)
    tmp, key, cfg = bench_config(videos)
    from serve.app import tune_serve

    ingress_dir = tune_serve(cfg)  # as `vifusion serve` runs it
    ray.init(
        num_cpus=4, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING
    )
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    try:
        levels, vectors = replicas_phase(cfg, key, videos, plan, counts)
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(ingress_dir, ignore_errors=True)
    print(
        f"workload: {len(videos)} videos, {vectors} frame vectors; {plan.per_client} requests per client"
    )
    print_table([lv for n in counts for lv in levels[n]])
    at4 = {n: next(lv for lv in levels[n] if lv.clients == 4) for n in counts}
    figures = {}
    for n in counts:
        name = "1_replica" if n == 1 else f"{n}_replicas"
        figures[f"qps_{name}"] = round(at4[n].qps, 2)
        figures[f"p50_ms_{name}"] = round(at4[n].pct_ms(50), 2)
    if 1 in at4 and 2 in at4:
        print(f"4 clients: 2 replicas / 1 replica QPS = {at4[2].qps / at4[1].qps:.2f}")
        figures["qps_2_over_1"] = round(at4[2].qps / at4[1].qps, 3)
    print(
        json.dumps(
            {
                "benchmark": "serve_load_replicas",
                "clients": 4,
                **figures,
                "errors": {str(n): sum(len(lv.errors) for lv in levels[n]) for n in counts},
                "vectors": vectors,
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "machine": machine(),
            }
        )
    )


def main() -> None:
    args = parse_args()
    if args.replicas:
        return replicas_main(args)
    import ray

    plan = Plan(
        quick=args.quick,
        levels=(1, 4) if args.quick else (1, 2, 4, 8),
        per_client=args.requests or (30 if args.quick else 100),
        limit_s=20.0 if args.quick else 60.0,
    )
    t_start = time.perf_counter()
    videos = write_videos(args.cache, args.quick)
    tmp, key, cfg = bench_config(videos)
    # --env NAME=VALUE overrides (e.g. RAY_SERVE_ENABLE_HA_PROXY=0); the local Ray cluster
    # started below, and all its workers, inherit the environment.
    env = dict(item.split("=", 1) for item in args.env)
    os.environ.update(env)
    ingress_dir = None
    if cfg.serve_tuned:  # as `vifusion serve` runs it
        from serve.app import tune_serve

        ingress_dir = tune_serve(cfg)
    ray.init(
        num_cpus=4, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING
    )
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    try:
        from ray import serve

        try:
            http, http_hits, vectors = http_phase(cfg, key, videos, plan)
        finally:
            serve.shutdown()  # the replica lets go of the data dir (and its shard actors end)
        inproc, inproc_hits = in_process_phase(cfg, plan)
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
        if ingress_dir is not None:
            shutil.rmtree(ingress_dir, ignore_errors=True)

    seconds = sum(probe_duration(v) for v in videos)
    print(
        f"workload: {len(videos)} videos, {seconds:.0f} s of video, {vectors} frame vectors in "
        f"{cfg.num_shards} shards; {len(QUERIES)} text queries cycled, top_k {TOP_K}; "
        f"{plan.per_client} requests per client (after {WARMUP_PER_CLIENT} warm-up), "
        f"{cfg.query_threads} torch query thread(s)" + (f"; env {env}" if env else "")
    )
    print_table(http + inproc)
    for lv in http:
        for e in sorted(set(lv.errors))[:5]:
            print(f"error ({lv.clients} clients): {e}")
    mismatched = [q for q in QUERIES if http_hits[q] != inproc_hits[q]]
    if mismatched:
        print(f"top hits differ between HTTP and in-process for: {mismatched}")
    ratios, cpu_ratios = {}, {}
    for h, i in zip(http, inproc):
        ratios[h.clients] = h.qps / i.qps if i.qps else float("nan")
        cpu_ratios[h.clients] = (
            i.cpu_ms_per_request / h.cpu_ms_per_request if h.cpu_ms_per_request else float("nan")
        )
        print(
            f"HTTP / in-process QPS at {h.clients} client{'s' if h.clients > 1 else ''}: {ratios[h.clients]:.0%}"
            f"   (CPU per request, in-process / HTTP: {cpu_ratios[h.clients]:.0%})"
        )
    at4 = ratios.get(4, float("nan"))
    print(
        f"at 4 clients: {at4:.0%} of in-process  (aim >= 70%: {'met' if at4 >= 0.7 else 'NOT met'})"
    )
    print(
        json.dumps(
            {
                "benchmark": "serve_load",
                "quick": args.quick,
                "videos": len(videos),
                "vectors": vectors,
                "queries": len(QUERIES),
                "top_k": TOP_K,
                "requests_per_client": plan.per_client,
                "results": [
                    {
                        "mode": lv.mode,
                        "clients": lv.clients,
                        "requests": lv.requests,
                        "errors": len(lv.errors),
                        "qps": round(lv.qps, 2),
                        "p50_ms": round(lv.pct_ms(50), 2),
                        "p99_ms": round(lv.pct_ms(99), 2),
                        "wall_s": round(lv.wall_s, 3),
                        "cpu_ms_per_request": round(lv.cpu_ms_per_request, 2),
                        "idle_cpu_percent": round(lv.idle_cpu_rate * 100, 1),
                        "time_limited": lv.cut,
                    }
                    for lv in http + inproc
                ],
                "ratios": {str(c): round(r, 3) for c, r in ratios.items()},
                "cpu_ratios": {str(c): round(r, 3) for c, r in cpu_ratios.items()},
                "ratio_at_4": round(at4, 3),
                "aim_met": bool(at4 >= 0.7),
                "top_hits_agree": not mismatched,
                "env": env,
                "total_s": round(time.perf_counter() - t_start, 1),
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "machine": machine(),
            }
        )
    )


def probe_duration(path: Path) -> float:
    from vifusion.extract.decode import probe

    return probe(path).duration_s


if __name__ == "__main__":
    main()
