"""An extractor's hand-over to its node aggregator: frames passed to another actor on the
same node by actor call, through the object store (Ray's default for arguments over
100 KiB) or inline in the call (``vifusion.runtime.RAY_TUNED``, up to 1 MiB), against
ViFusion's local socket (``vifusion.fusion.handoff``).

Each variant runs in a Ray of its own (the limit is set when Ray starts), on the same work:
an actor hands another one ``FusedBatch``es of 16, 64 and 256 frames (real row size, 6.6 KB
a frame) through the product's ``Handoff``, one hand-over in flight as the extractor does
(it waits for the last one before sending the next). Printed per size: hand-overs/s,
frames/s, and CPU per 1000 frames of the sender, the receiver and the raylet (the object
store), from /proc.

Run:  .venv/bin/python benchmarks/handoff.py [--quick]
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import arguments, cpu_seconds, emit_result, report_head, run_benchmark

SIZES = (16, 64, 256)


def measure(calls: int, local: bool) -> dict:
    """One variant, in this process's own Ray (started from the environment it was given);
    ``local``: through the receiver's socket, else by actor call."""
    import numpy as np
    import ray

    from vifusion.fusion.handoff import Handoff, HandoffServer
    from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FusedBatch

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)

    @ray.remote(num_cpus=0, max_concurrency=4)
    class Receiver:
        """The aggregator's two ways in, doing nothing with what comes but count it."""

        def __init__(self) -> None:
            self.rows = 0
            self.server = HandoffServer(self.submit, "bench")

        def handoff_address(self) -> tuple[str, bytes]:
            return self.server.address, self.server.secret

        def submit(self, shard_no: int, batch: FusedBatch, extracted: float, urgent: bool) -> str:
            self.rows += len(batch)
            return "bench"

        def cpu(self) -> float:
            t = os.times()
            return t.user + t.system

    @ray.remote(num_cpus=0)
    class Sender:
        def run(self, receiver, rows: int, n: int) -> tuple[float, float]:
            handoff = Handoff(receiver, local=local)
            rng = np.random.default_rng(0)
            batches = [
                FusedBatch(
                    np.arange(rows, dtype=np.int64),
                    np.zeros((rows, 2), np.float32),
                    rng.random((rows, VISUAL_DIM + SEMANTIC_DIM), np.float32),
                )
                for _ in range(4)
            ]
            t0, c0 = time.perf_counter(), os.times()
            handing = None
            for i in range(n):
                if handing is not None:
                    handing.result()
                handing = handoff.submit(0, batches[i % 4], 0.0)
            handing.result()
            c1 = os.times()
            assert handoff.by_socket == local
            handoff.close()
            return time.perf_counter() - t0, (c1.user + c1.system) - (c0.user + c0.system)

    receiver, sender = Receiver.remote(), Sender.remote()
    ray.get(sender.run.remote(receiver, 16, 50))  # warm-up
    out = {}
    for rows in SIZES:
        n = max(calls * 64 // rows, 50)
        r0, l0 = ray.get(receiver.cpu.remote()), _raylet_cpu()
        wall, sender_cpu = ray.get(sender.run.remote(receiver, rows, n))
        r1, l1 = ray.get(receiver.cpu.remote()), _raylet_cpu()
        per_k = 1000 / (n * rows)
        out[rows] = {
            "handovers_per_s": n / wall,
            "frames_per_s": n * rows / wall,
            "cpu_ms_per_1000_frames": {
                "sender": 1e3 * sender_cpu * per_k,
                "receiver": 1e3 * (r1 - r0) * per_k,
                "raylet": 1e3 * (l1 - l0) * per_k,
            },
        }
        out[rows]["cpu_ms_per_1000_frames"]["total"] = sum(
            out[rows]["cpu_ms_per_1000_frames"].values()
        )
    ray.shutdown()
    return out


def _raylet_cpu() -> float:
    """CPU seconds of this machine's raylets (this benchmark's Ray is the only one it starts)."""
    pids = subprocess.run(
        ["pgrep", "-f", "raylet/raylet"], capture_output=True, text=True
    ).stdout.split()
    return sum(cpu_seconds(pid) for pid in pids)


def main() -> int:
    ap = arguments(__doc__, quick="fewer hand-overs (under a minute)")
    ap.add_argument("--measure", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--socket", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        emit_result(measure(args.measure, args.socket))
        return 0

    from vifusion.runtime import RAY_TUNED

    if subprocess.run(["pgrep", "-f", "raylet/raylet"], capture_output=True).returncode == 0:
        print(
            "another Ray runs on this machine: its raylet would count here; stop it first",
            file=sys.stderr,
        )
        return 2
    calls = 300 if args.quick else 2000
    base = {k: v for k, v in os.environ.items() if k not in RAY_TUNED and k != "RAY_ADDRESS"}
    tuned = {**base, **RAY_TUNED}
    variants = {
        "object store": (base, []),
        "inline (RAY_TUNED)": (tuned, []),
        "local socket": (tuned, ["--socket"]),
    }
    report = report_head("handoff", args.quick) | {"variants": {}}
    for name, (env, flags) in variants.items():
        proc = subprocess.run(
            [sys.executable, __file__, "--measure", str(calls), *flags],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            raise RuntimeError(f"{name}: the run failed:\n{proc.stderr[-3000:]}")
        report["variants"][name] = json.loads(line[7:])
    store, inline, local = report["variants"].values()
    print(
        f"{'frames':>6}  {'variant':<20} {'hand-overs/s':>12} {'frames/s':>10}  CPU ms per 1000 frames "
        f"(sender + receiver + raylet)"
    )
    for rows in SIZES:
        for name, res in report["variants"].items():
            r = res[str(rows)]
            c = r["cpu_ms_per_1000_frames"]
            print(
                f"{rows:>6}  {name:<20} {r['handovers_per_s']:>12.0f} {r['frames_per_s']:>10.0f}  "
                f"{c['total']:6.1f} = {c['sender']:.1f} + {c['receiver']:.1f} + {c['raylet']:.1f}"
            )
    report["ratios"] = {
        f"{rows}_frames": {
            "cpu_store_over_inline": round(
                store[str(rows)]["cpu_ms_per_1000_frames"]["total"]
                / inline[str(rows)]["cpu_ms_per_1000_frames"]["total"],
                3,
            ),
            "frames_per_s_inline_over_store": round(
                inline[str(rows)]["frames_per_s"] / store[str(rows)]["frames_per_s"], 3
            ),
            "cpu_inline_over_socket": round(
                inline[str(rows)]["cpu_ms_per_1000_frames"]["total"]
                / local[str(rows)]["cpu_ms_per_1000_frames"]["total"],
                3,
            ),
            "frames_per_s_socket_over_inline": round(
                local[str(rows)]["frames_per_s"] / inline[str(rows)]["frames_per_s"], 3
            ),
        }
        for rows in SIZES
    }
    print("ratios:", report["ratios"])
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    run_benchmark(main, "handoff benchmark")
