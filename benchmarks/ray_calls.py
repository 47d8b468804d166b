"""What one Ray actor call costs, by size: wall time and CPU on each side, inline in the
call against through the object store.

The fusion layer's batch size amortises a per-message cost (``vifusion/fusion/policy.py``)
and its transport picks the path by size (``vifusion/comm/transport.py``: inline up to
Ray's limit, which ViFusion raises to 1 MiB, ``vifusion.runtime.RAY_TUNED``). This measures
both paths on the same messages: a ``WireBatch`` of N real-sized fp32 frames sent to an
actor that does nothing with it, four calls in flight, Ray as ViFusion runs it
(``RAY_TUNED``), first on one node, then (with root, ``--nodes 2`` or the default) across
two nodes of the network test bed joined by a 1 Gbit link (``deploy/netbed.py``, veth +
tbf), where the object store path adds a transfer between the nodes' stores. CPU is each
process's user + system time over the calls (Ray's own threads included), the sender's,
the receiver's and that of Ray's node processes (raylets, GCS; the object store path moves
objects through them): on a machine whose cores all of them share, it is what a message
takes from everything else.

Run:  sudo .venv/bin/python benchmarks/ray_calls.py [--quick] [--nodes 1]
It ends with one line of JSON holding every figure.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import arguments, cpu_seconds, drive_in_bed, emit_result, report_head, run_benchmark

from vifusion.runtime import tune_ray  # noqa: E402

tune_ray()  # before Ray starts: the inline limit ViFusion runs with

import ray  # noqa: E402

from vifusion.comm.codec import Ladder  # noqa: E402
from vifusion.comm.message import WireBatch  # noqa: E402
from vifusion.comm.transport import inline_limit  # noqa: E402
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


def _ray_cpu() -> float:
    """CPU seconds of Ray's node processes (raylets, which move objects between stores, and
    the GCS) on this machine: the object store path spends there too."""
    total = 0.0
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and b"/ray/core/src/ray/" in (d / "cmdline").read_bytes():
                total += cpu_seconds(d.name)
        except OSError:
            continue
    return total


def measure(sink, wire: WireBatch, calls: int, put: bool) -> dict:
    """Per call: wall time, CPU of the sender, the receiver and Ray's node processes (ms)."""
    for _ in range(20):  # warm both paths
        ray.get(sink.receive.remote(ray.put(wire) if put else wire))
    r0, c0, n0, t0 = ray.get(sink.cpu.remote()), _cpu(), _ray_cpu(), time.perf_counter()
    in_flight = []
    for _ in range(calls):
        in_flight.append(sink.receive.remote(ray.put(wire) if put else wire))
        if len(in_flight) >= WINDOW:
            ray.get(in_flight.pop(0))
    ray.get(in_flight)
    wall, sender, nodes = time.perf_counter() - t0, _cpu() - c0, _ray_cpu() - n0
    receiver = ray.get(sink.cpu.remote()) - r0
    return {
        "wall_ms": 1e3 * wall / calls,
        "sender_cpu_ms": 1e3 * sender / calls,
        "receiver_cpu_ms": 1e3 * receiver / calls,
        "ray_cpu_ms": 1e3 * nodes / calls,
    }


def run(calls: int, address: str | None) -> dict:
    """Every size on both paths; ``address``: a Ray whose node ``host1`` takes the sink
    (None: a local one-node Ray)."""
    if address is None:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        sink = ray.remote(Sink).options(num_cpus=0).remote()
    else:
        ray.init(address=address, log_to_driver=False)
        sink = ray.remote(Sink).options(num_cpus=0, resources={"host1": 1}).remote()
    ray.get(sink.cpu.remote())
    fp32 = Ladder(None).codecs[0]
    rng = np.random.default_rng(0)
    limit = inline_limit()
    out = {"inline_limit_bytes": limit, "sizes": {}}
    print(
        f"one actor call, {WINDOW} in flight, {calls} calls; inline limit {limit >> 10} KiB",
        flush=True,
    )
    for frames in (1, 10, 40, 80, 150):
        x = rng.random((frames, VISUAL_DIM + SEMANTIC_DIM), dtype=np.float32)
        batch = FusedBatch(np.arange(frames, dtype=np.int64), np.zeros((frames, 2), np.float32), x)
        wire = WireBatch(batch.ids, batch.times, fp32.encode(batch.features), "bench")
        store = measure(sink, wire, calls, put=True)
        inline = measure(sink, wire, calls, put=False) if wire.nbytes <= limit else None
        key = f"{frames * FRAME_BYTES >> 10}KiB"
        out["sizes"][key] = {"frames": frames, "object_store": store, "inline": inline}
        for name, r in (("object store", store), ("inline", inline)):
            if r:
                print(
                    f"  {frames:4d} frames ({wire.nbytes >> 10:4d} KiB) {name:12s}  wall {r['wall_ms']:5.2f} ms  "
                    f"CPU sender {r['sender_cpu_ms']:5.2f} ms  receiver {r['receiver_cpu_ms']:5.2f} ms  "
                    f"Ray's node processes {r['ray_cpu_ms']:5.2f} ms"
                )
        if inline:
            ratio = _cpu_ms(inline) / _cpu_ms(store)
            out["sizes"][key]["cpu_inline_over_store"] = round(ratio, 3)
            out["sizes"][key]["wall_inline_over_store"] = round(
                inline["wall_ms"] / store["wall_ms"], 3
            )
            print(
                f"       inline / object store: CPU {ratio:.2f}, wall {inline['wall_ms'] / store['wall_ms']:.2f}",
                flush=True,
            )
    ray.shutdown()
    return out


def _cpu_ms(r: dict) -> float:
    return r["sender_cpu_ms"] + r["receiver_cpu_ms"] + r["ray_cpu_ms"]


def across(calls: int) -> dict:
    """``run`` from host 0 of a two-host bed to host 1, 1 Gbit between them."""
    from deploy.netbed import NetBed
    from vifusion.runtime import RAY_TUNED

    with NetBed(hosts=2, rate="1gbit", delay_ms=0) as bed:
        address = bed.start_ray(num_cpus=2, env=RAY_TUNED)
        spec = {"address": address, "calls": calls}
        return drive_in_bed(bed, spec, timeout=600, failed="the driver on host 0 failed", echo=True)


def main() -> int:
    ap = arguments(__doc__, quick="fewer calls (under a minute)", drive=True)
    ap.add_argument(
        "--nodes",
        type=int,
        choices=(1, 2),
        default=2,
        help="2 (default): also across two test-bed nodes (needs root)",
    )
    args = ap.parse_args()
    if args.drive:
        spec = json.loads(args.drive)
        emit_result(run(spec["calls"], spec["address"]))
        return 0
    from deploy.netbed import available

    calls = 200 if args.quick else 1000
    report = report_head("ray_calls", args.quick)
    print("== one node", flush=True)
    report["one_node"] = run(calls, None)
    if args.nodes == 2:
        if (reason := available(delay=False)) is not None:
            print(f"two nodes skipped: {reason}", file=sys.stderr)
        else:
            print("== two nodes, 1 Gbit", flush=True)
            report["two_nodes_1gbit"] = across(calls)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    run_benchmark(main, "ray_calls benchmark")
