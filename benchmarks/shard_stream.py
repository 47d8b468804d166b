"""The shard's end of the shard stream: each batch's log sync run beside the next batch
(a group commit, ``vifusion.index.replica``) against each batch synced before the next is
read (the shard as it was; the baseline).

Work: a real shard replica (FAISS, its write-ahead log on the data disk, fdatasync per
acknowledgement) in a process of its own, behind a real stream server on loopback; this
process sends fused batches of real size (frames of 6.6 KB) as fast as the shard
acknowledges them, three in flight as the fusion policy keeps them, for a few seconds per
batch size. The two variants alternate (each round the other goes first), each on a fresh
shard. Printed per variant and size: frames/s and MB/s the shard took, the p50 of a
batch's round trip (send to acknowledgement), and the CPU per 1000 frames of the sender's
process and the shard's (which a busy machine changes far less than frames/s).

Run:  .venv/bin/python benchmarks/shard_stream.py [--quick] [--dir PATH]
It ends with one line of JSON holding every figure.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import arguments, cpu_seconds, report_head, run_benchmark  # noqa: E402

from vifusion.comm.codec import Ladder  # noqa: E402
from vifusion.comm.message import WireBatch  # noqa: E402
from vifusion.comm.stream import ShardStream  # noqa: E402
from vifusion.types import FRAME_BITS, SEMANTIC_DIM, VISUAL_DIM  # noqa: E402

VARIANTS = ("serial", "group")
WINDOW = 3
ROW_BYTES = 4 * (VISUAL_DIM + SEMANTIC_DIM) + 16  # features, id, times


def serve(directory: str, variant: str, conn) -> None:
    """The shard's process: a primary replica and a stream server; ``serial`` commits each
    batch before the server reads the next."""
    from vifusion.comm.stream import StreamServer
    from vifusion.config import Config
    from vifusion.index.replica import ShardReplica

    cfg = Config(
        data_dir=Path(directory),
        faiss_threads=1,
        index_exact_max=10**9,
        snapshot_log_bytes=1 << 40,
        fusion_stream=False,
    )
    replica = ShardReplica(0, Path(directory) / "shard", cfg, followers=[])
    if variant == "serial":

        def stage(batch):
            ack = replica.receive(batch)
            return lambda: ack
    else:
        stage = replica._stage
    server = StreamServer(stage, replica.ping, "127.0.0.1")
    conn.send((server.address, server.secret))
    conn.recv()  # until the sender is done
    server.close()


def run(directory: Path, variant: str, kib: int, seconds: float) -> dict:
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    child = ctx.Process(target=serve, args=(str(directory), variant, theirs), daemon=True)
    child.start()
    stream = ShardStream(*ours.recv())
    rows = max(1, kib * 1024 // ROW_BYTES)
    rng = np.random.default_rng(kib)
    features = rng.standard_normal((rows, VISUAL_DIM + SEMANTIC_DIM), dtype=np.float32)
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    payload = Ladder().get("fp32").encode(features)
    times = np.zeros((rows, 2), np.float32)
    frame_nos = np.arange(rows, dtype=np.int64)
    sent: list[tuple] = []
    trips: list[float] = []
    i = frames = 0
    cpu0 = cpu_seconds(os.getpid()), cpu_seconds(child.pid)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds or sent:
        if len(sent) >= WINDOW or time.perf_counter() - t0 >= seconds:
            future, t = sent.pop(0)
            future.result(60)
            trips.append(time.perf_counter() - t)
            frames += rows
            continue
        ids = (
            (1 + i) << FRAME_BITS
        ) | frame_nos  # vector_id(1 + i, j) for every j, without a loop per batch
        sent.append((stream.send(WireBatch(ids, times, payload, f"b{i}")), time.perf_counter()))
        i += 1
    elapsed = time.perf_counter() - t0
    sender_s, shard_s = (cpu_seconds(pid) - c for pid, c in zip((os.getpid(), child.pid), cpu0))
    stream.close()
    ours.send(None)
    child.join(30)
    return {
        "frames_per_s": frames / elapsed,
        "mb_per_s": frames * ROW_BYTES / elapsed / 1e6,
        "round_trip_p50_ms": float(np.median(trips)) * 1e3,
        "batches": len(trips),
        "sender_cpu_ms_per_1000_frames": 1e6 * sender_s / frames,
        "shard_cpu_ms_per_1000_frames": 1e6 * shard_s / frames,
    }


def main() -> int:
    ap = arguments(__doc__, quick="two sizes, one round (under a minute)")
    ap.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the shards go (default: a temporary directory)",
    )
    args = ap.parse_args()
    sizes, rounds, seconds = ((64, 256), 1, 4.0) if args.quick else ((64, 128, 256, 512), 3, 6.0)
    print(f"{rounds} round(s) of {seconds:.0f} s per batch size, {WINDOW} batches in flight")
    results: dict[str, dict[int, list[dict]]] = {v: {k: [] for k in sizes} for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="vf-stream-bench-", dir=args.dir) as tmp:
        for r in range(rounds):
            for kib in sizes:
                for variant in VARIANTS[:: 1 if r % 2 == 0 else -1]:
                    out = run(Path(tmp) / f"{variant}-{kib}-{r}", variant, kib, seconds)
                    results[variant][kib].append(out)
                    print(
                        f"  round {r + 1} {kib:4d} KiB {variant:6s} {out['frames_per_s']:7.0f} frames/s"
                        f"  {out['mb_per_s']:6.1f} MB/s  round trip p50 {out['round_trip_p50_ms']:.2f} ms"
                        f"  CPU ms per 1000 frames: sender {out['sender_cpu_ms_per_1000_frames']:.1f}"
                        f" shard {out['shard_cpu_ms_per_1000_frames']:.1f}"
                    )
    med = {
        v: {
            kib: {k: float(np.median([o[k] for o in outs])) for k in outs[0]}
            for kib, outs in per.items()
        }
        for v, per in results.items()
    }
    ratios = {}
    for kib in sizes:
        s, g = med["serial"][kib], med["group"][kib]
        ratios[f"{kib}K_fps_group_over_serial"] = round(g["frames_per_s"] / s["frames_per_s"], 3)
        ratios[f"{kib}K_p50_group_over_serial"] = round(
            g["round_trip_p50_ms"] / s["round_trip_p50_ms"], 3
        )
        print(
            f"{kib:4d} KiB (median of rounds)  serial {s['frames_per_s']:7.0f} frames/s p50 {s['round_trip_p50_ms']:.2f} ms"
            f"  group {g['frames_per_s']:7.0f} frames/s p50 {g['round_trip_p50_ms']:.2f} ms"
        )
    print("ratios:", ratios)
    print(
        json.dumps(
            report_head("shard_stream", args.quick)
            | {
                "window": WINDOW,
                "seconds": seconds,
                "rounds": rounds,
                "results": med,
                "ratios": ratios,
            }
        )
    )
    return 0


if __name__ == "__main__":
    run_benchmark(main, "shard_stream benchmark")
