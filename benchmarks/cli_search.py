"""`vifusion search "a cat"` as a user runs it: a fresh process each time, on the demo's
data dir (its three sample videos indexed by `vifusion index`), the file cache warm.

Paths timed (each run once untimed first, to warm the file cache):

- **ray**: the Ray path (``--address local``: a Ray started for the one query, the shard
  actors, both torch models), what every search took before.
- **local**: no service running: the data dir read in the command's process (no Ray), the
  query embedded by the ONNX export of the text model (no torch).
- **service** (``--service``): a `vifusion serve` of the same data dir is running, and the
  command asks it (``service.json``).

Per path: the median wall time of N runs, the median CPU time (user + system) of the command's
process, and its peak RSS (both from ``wait4``: the Ray path's GCS, raylet and workers come
on top, not counted). CPU time tells what a busy machine's wall time hides; the load average
at the start and end is in the JSON. Aim: local at most 1.5 s.

Run:  .venv/bin/python benchmarks/cli_search.py [--quick] [--service] [--data-dir DIR]
It ends with one line of JSON holding every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, run_benchmark  # noqa: E402

QUERY = "a cat"
AIM_S = 1.5
# Serve's HAProxy ports, apart from the defaults a test run or another service may hold.
SERVE_ENV = {"RAY_SERVE_HAPROXY_METRICS_PORT": "19491", "RAY_SERVE_HAPROXY_STATS_PORT": "18691"}


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "vifusion.cli", *args]


def timed(argv: list[str]) -> tuple[float, float, float]:
    """One run: (wall seconds, CPU seconds, peak RSS in MiB) of the process. Fails loudly on a
    bad exit."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env())
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}"
        )
    proc.stderr.close()
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def measure(name: str, argv: list[str], runs: int) -> dict:
    timed(argv)  # warm the file cache
    walls, cpus, rss = zip(*(timed(argv) for _ in range(runs)))
    out = {
        "median_s": round(statistics.median(walls), 3),
        "min_s": round(min(walls), 3),
        "cpu_s": round(statistics.median(cpus), 3),
        "peak_rss_mib": round(max(rss)),
        "runs": runs,
    }
    print(
        f"{name:8} median {out['median_s']:6.2f} s  (min {out['min_s']:.2f} s, {runs} runs)  "
        f"CPU {out['cpu_s']:.2f} s  peak RSS {out['peak_rss_mib']} MiB",
        flush=True,
    )
    return out


def index_demo(data: Path, work: Path) -> None:
    from vifusion.samples import write_demo_set

    videos = work / "videos"
    write_demo_set(videos)
    print(f"indexing the demo videos into {data} ...", flush=True)
    subprocess.run(
        cli("index", "--quiet", "--data-dir", str(data), str(videos)),
        check=True,
        env=_env(),
        stdout=subprocess.DEVNULL,
    )


def start_service(data: Path, port: int) -> subprocess.Popen:
    from vifusion.cluster.running import running_url

    proc = subprocess.Popen(
        cli("serve", "--data-dir", str(data), "--port", str(port)),
        env={**_env(), **SERVE_ENV},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while running_url(data) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_service(proc)
            raise RuntimeError("vifusion serve did not come up")
        time.sleep(1)
    return proc


def stop_service(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: it withdraws service.json and stops its Ray
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs")
    ap.add_argument(
        "--service",
        action="store_true",
        help="also time the search through a running `vifusion serve`",
    )
    ap.add_argument(
        "--data-dir",
        type=Path,
        help="an indexed data dir to search (default: the demo videos, indexed into a temp dir)",
    )
    ap.add_argument("--port", type=int, default=18471, help="the service's port (--service)")
    args = ap.parse_args()
    runs, ray_runs = (3, 1) if args.quick else (10, 3)
    load_at_start = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="vifusion-cli-search-"))
    try:
        data = args.data_dir or work / "data"
        if args.data_dir is None:
            index_demo(data, work)
        search = ["search", "--data-dir", str(data), QUERY]
        figures = {
            "local": measure("local", cli(*search), runs),
            "ray": measure("ray", cli(*search[:-1], "--address", "local", QUERY), ray_runs),
        }
        if args.service:
            service = start_service(data, args.port)
            try:
                figures["service"] = measure("service", cli(*search), runs)
            finally:
                stop_service(service)
        ratio = figures["ray"]["median_s"] / figures["local"]["median_s"]
        met = figures["local"]["median_s"] <= AIM_S
        print(
            f"local is {ratio:.1f}x faster than the Ray path; aim <= {AIM_S} s: {'met' if met else 'NOT met'}"
        )
        print(
            json.dumps(
                {
                    "benchmark": "cli_search",
                    "query": QUERY,
                    "quick": args.quick,
                    "machine": machine(),
                    **figures,
                    "speedup": round(ratio, 1),
                    "aim_s": AIM_S,
                    "aim_met": met,
                    "load_avg_1m": [round(load_at_start, 2), round(os.getloadavg()[0], 2)],
                }
            )
        )
        return 0 if met else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    run_benchmark(main, "cli_search")
