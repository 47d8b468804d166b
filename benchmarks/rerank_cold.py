"""Re-ranking from a vector file larger than the page cache: each way of reading its rows, on
the same file, the same candidates, in one run.

A compressed space re-scores each search's top ``k * refine`` candidates (10 x 100) with their
exact fp16 vectors, read through a memory map of the shard's vector file
(``vifusion.index._vectors``). At ten million frames the visual file alone is 25.6 GB.

Workload: one visual vector file (1280-d fp16) of ``--rows`` rows (4,000,000: 10.2 GB),
written once into ``--dir`` and kept there. Each mode runs in a child process of its own,
inside a memory cgroup of ``--memory`` (2 GiB; cgroup v1 or v2), so that no more of the file
stays cached than on a node whose vector files exceed its RAM, after the page cache is
dropped:

- **queries**: ``--queries`` (100) searches' re-ranking, 1,000 candidate rows each drawn at
  random over the file, through ``VectorStore.inner_products``: ms a query (p50, p99, the
  last half's p50: the steady state) and MB read from the disk a query (``/proc/self/io``);
- **pass**: a re-training's pass through the first ``--pass-rows`` rows (1,000,000) in
  pieces of 65,536, through ``read_rows``: GB/s.

Modes (``--modes``): ``readahead``, the rows read through the map the kernel reads ahead in,
as every read was first (a re-training's pass still is); ``one-thread``, through the map
advised random, each fault waited for in turn, as re-ranking read until the rows of a cold
read were shared among threads; ``vifusion``, ``VectorStore.inner_products`` as it is.
Baseline: the first mode named. Needs root (the cgroup, ``drop_caches``).

Run:  .venv/bin/python benchmarks/rerank_cold.py [--rows 1000000 --memory 1G]  (a smaller run)
It ends with one line of JSON holding every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

from vifusion.index._vectors import HEADER, VectorStore  # noqa: E402

D = 1280
CANDIDATES = 1000  # k 10 x refine 100, the policy's default
PIECE = 1 << 16  # a re-training's piece (space._FILL_PIECE)
CGROUP = "vifusion-bench-rerank"
MODES = ("readahead", "one-thread", "vifusion")


def write_file(path: Path, rows: int) -> None:
    """``rows`` random unit vectors, fp16, as a shard writes them (kept between runs)."""
    if path.exists() and path.stat().st_size == HEADER + rows * D * 2:
        return
    path.unlink(missing_ok=True)
    store = VectorStore(path, D)
    rng = np.random.default_rng(0)
    for at in range(0, rows, PIECE):
        x = rng.standard_normal((min(PIECE, rows - at), D), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        store.append(np.arange(at, at + len(x)), x)
    store.sync()


def _cgroup(memory: int) -> Path:
    """A memory cgroup capped at ``memory`` bytes (v1, else v2), created if missing."""
    v1 = Path("/sys/fs/cgroup/memory")
    if v1.is_dir():
        group = v1 / CGROUP
        group.mkdir(exist_ok=True)
        (group / "memory.limit_in_bytes").write_text(str(memory))
        return group
    root = Path("/sys/fs/cgroup")
    if "memory" not in (root / "cgroup.controllers").read_text().split():
        sys.exit("no memory cgroup controller here: the run needs one to cap the page cache")
    group = root / CGROUP
    group.mkdir(exist_ok=True)
    (group / "memory.max").write_text(str(memory))
    return group


def _read_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    return 0


def probe(path: Path, rows: int, mode: str, queries: int, pass_rows: int) -> dict:
    """One mode's figures, in this (capped, cold) process."""
    store = VectorStore(path, D, writable=False)
    store.open_at(rows, np.arange(rows), np.arange(rows))
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, D), dtype=np.float32)
    q /= np.linalg.norm(q)
    took, read = [], []
    for _ in range(queries):
        cand = rng.choice(rows, (1, CANDIDATES), replace=False)
        b0, t0 = _read_bytes(), time.perf_counter()
        if mode == "vifusion":
            store.inner_products(q, cand)
        elif mode == "one-thread":  # the map advised random, read on this thread
            store._mapped()[cand.ravel()].astype(np.float32) @ q[0]
        else:  # the map that the kernel reads ahead in
            store.read_rows(cand.ravel(), in_order=True) @ q[0]
        took.append((time.perf_counter() - t0) * 1000)
        read.append(_read_bytes() - b0)
    t0 = time.perf_counter()
    for at in range(0, pass_rows, PIECE):
        piece = np.arange(at, min(at + PIECE, pass_rows))
        store.read_rows(piece, in_order=True)
    pass_s = time.perf_counter() - t0
    last = took[len(took) // 2 :]
    return {
        "p50_ms": round(float(np.percentile(took, 50)), 1),
        "p99_ms": round(float(np.percentile(took, 99)), 1),
        "last_half_p50_ms": round(float(np.percentile(last, 50)), 1),
        "mb_read_per_query": round(float(np.mean(read)) / 1e6, 2),
        "pass_gb_per_s": round(pass_rows * D * 2 / pass_s / 1e9, 2),
    }


def run_mode(args: argparse.Namespace, path: Path, group: Path, mode: str) -> dict:
    """``probe`` in a child process put into the cgroup, after the page cache is dropped."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("1")
    child = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--probe",
            mode,
            "--dir",
            str(args.dir),
            "--rows",
            str(args.rows),
            "--queries",
            str(args.queries),
            "--pass-rows",
            str(args.pass_rows),
        ],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid())),
    )
    out, _ = child.communicate()
    if child.returncode:
        sys.exit(f"the {mode} probe failed ({child.returncode})")
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--memory", default="2G", help="the cgroup's memory cap (K, M, G suffixes)")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--pass-rows", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/vifusion-bench/rerank"))
    ap.add_argument(
        "--modes",
        default="one-thread,vifusion",
        help="modes to run, the baseline first (readahead, one-thread, vifusion); readahead "
        "takes about 5 s a query",
    )
    ap.add_argument("--probe", choices=MODES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    path = args.dir / "visual.f16"
    if args.probe:
        fig = probe(path, args.rows, args.probe, args.queries, min(args.pass_rows, args.rows))
        print(json.dumps(fig))
        return
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    memory = (
        int(args.memory[:-1]) * units[args.memory[-1]]
        if args.memory[-1] in units
        else int(args.memory)
    )
    args.dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    write_file(path, args.rows)
    size = path.stat().st_size
    print(
        f"vector file: {args.rows:,} rows, {size / 1e9:.1f} GB ({time.perf_counter() - t0:.0f} s)"
    )
    group = _cgroup(memory)
    report = {
        "benchmark": "rerank_cold",
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "rows": args.rows,
        "file_gb": round(size / 1e9, 2),
        "memory_cap_gb": round(memory / 1e9, 2),
        "read_ahead_kb": _read_ahead_kb(path),
        "queries": args.queries,
        "candidates": CANDIDATES,
    }
    modes = args.modes.split(",")
    if len(modes) < 2 or any(m not in MODES for m in modes):
        ap.error(f"--modes: at least two of {MODES}, the baseline first")
    for mode in modes:
        report[mode] = run_mode(args, path, group, mode)
        print(f"{mode:<10} {report[mode]}", flush=True)
    base = report[modes[0]]
    print()
    print(
        f"re-ranking from a {report['file_gb']} GB vector file, {report['memory_cap_gb']} GB of memory, cold"
    )
    print(f"{'':<26}" + "".join(f"{m:>12}" for m in modes) + f"{'ratio':>8}")
    for name, key in (
        ("p50 ms a query", "p50_ms"),
        ("p50 ms, last half", "last_half_p50_ms"),
        ("p99 ms a query", "p99_ms"),
        ("MB read a query", "mb_read_per_query"),
        ("re-training pass GB/s", "pass_gb_per_s"),
    ):
        last = report[modes[-1]][key]
        # ratios as "how many times better": time and bytes fall, throughput rises
        ratio = last / base[key] if key == "pass_gb_per_s" else base[key] / max(last, 1e-3)
        report[f"{key}_ratio"] = round(ratio, 2)
        cells = "".join(f"{report[m][key]:>12}" for m in modes)
        print(f"{name:<26}{cells}{ratio:>7.2f}x")
    print(json.dumps(report))


def _read_ahead_kb(path: Path) -> int | None:
    """The read-ahead of the disk holding ``path`` (a partition's is its disk's)."""
    dev = os.stat(path).st_dev
    block = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    for queue in (block / "queue", block / ".." / "queue"):
        if (queue / "read_ahead_kb").is_file():
            return int((queue / "read_ahead_kb").read_text())
    return None


if __name__ == "__main__":
    main()
