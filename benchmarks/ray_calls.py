"""What one Ray actor call costs, by size: wall time and CPU on each side, inline in the
call against through the object store.

The fusion layer's batch size amortises a per-message cost (``vifusion/fusion/policy.py``)
and its transport picks the path by size (``vifusion/comm/transport.py``: inline up to
Ray's limit, which ViFusion raises to 1 MiB, ``vifusion.runtime.RAY_TUNED``). This measures
both paths on the same messages: a ``WireBatch`` of N real-sized fp32 frames sent to an
actor that does nothing with it, four calls in flight, on one local Ray (``RAY_TUNED``).
CPU is each process's user + system time over the calls (Ray's own threads included): on a
machine whose cores both sides share, it is what a message takes from everything else.

Run:  .venv/bin/python benchmarks/ray_calls.py [--quick]
It ends with one line of JSON holding every figure.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from vifusion.runtime import tune_ray  # noqa: E402

tune_ray()  # before Ray starts: the inline limit ViFusion runs with

import ray  # noqa: E402

from vifusion.comm.codec import Ladder  # noqa: E402
from vifusion.comm.transport import WireBatch, inline_limit  # noqa: E402
from vifusion.fusion.buffer import FRAME_BYTES  # noqa: E402
from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FusedBatch  # noqa: E402

WINDOW = 4


class Sink:
    def receive(self, wire: WireBatch) -> int:
        return len(wire)

    def cpu(self) -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(sink, wire: WireBatch, calls: int, put: bool) -> dict:
    """Per call: wall time, sender CPU, receiver CPU (ms)."""
    for _ in range(20):  # warm both paths
        ray.get(sink.receive.remote(ray.put(wire) if put else wire))
    r0, c0, t0 = ray.get(sink.cpu.remote()), _cpu(), time.perf_counter()
    in_flight = []
    for _ in range(calls):
        in_flight.append(sink.receive.remote(ray.put(wire) if put else wire))
        if len(in_flight) >= WINDOW:
            ray.get(in_flight.pop(0))
    ray.get(in_flight)
    wall, sender = time.perf_counter() - t0, _cpu() - c0
    receiver = ray.get(sink.cpu.remote()) - r0
    return {"wall_ms": 1e3 * wall / calls, "sender_cpu_ms": 1e3 * sender / calls,
            "receiver_cpu_ms": 1e3 * receiver / calls}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer calls (under a minute)")
    args = ap.parse_args()
    from _common import machine

    calls = 200 if args.quick else 1000
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    sink = ray.remote(Sink).options(num_cpus=0).remote()
    ray.get(sink.cpu.remote())
    fp32 = Ladder(None).codecs[0]
    rng = np.random.default_rng(0)
    limit = inline_limit()
    report = {"benchmark": "ray_calls", "quick": args.quick, "machine": machine(),
              "date": time.strftime("%Y-%m-%d"), "inline_limit_bytes": limit, "sizes": {}}
    print(f"one actor call, {WINDOW} in flight, {calls} calls; inline limit {limit >> 10} KiB")
    for frames in (1, 10, 80, 150):
        x = rng.random((frames, VISUAL_DIM + SEMANTIC_DIM), dtype=np.float32)
        batch = FusedBatch(np.arange(frames, dtype=np.int64), np.zeros((frames, 2), np.float32), x)
        wire = WireBatch(batch.ids, batch.times, fp32.encode(batch.features), "bench")
        store = measure(sink, wire, calls, put=True)
        inline = measure(sink, wire, calls, put=False) if wire.nbytes <= limit else None
        key = f"{frames * FRAME_BYTES >> 10}KiB"
        report["sizes"][key] = {"frames": frames, "object_store": store, "inline": inline}
        for name, r in (("object store", store), ("inline", inline)):
            if r:
                print(f"  {frames:4d} frames ({wire.nbytes >> 10:4d} KiB) {name:12s}  wall {r['wall_ms']:5.2f} ms  "
                      f"CPU sender {r['sender_cpu_ms']:5.2f} ms  receiver {r['receiver_cpu_ms']:5.2f} ms")
        if inline:
            ratio = (inline["sender_cpu_ms"] + inline["receiver_cpu_ms"]) / (
                store["sender_cpu_ms"] + store["receiver_cpu_ms"])
            report["sizes"][key]["cpu_inline_over_store"] = round(ratio, 3)
            report["sizes"][key]["wall_inline_over_store"] = round(inline["wall_ms"] / store["wall_ms"], 3)
            print(f"       inline / object store: CPU {ratio:.2f}, wall {inline['wall_ms'] / store['wall_ms']:.2f}")
    ray.shutdown()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
