"""A reindex while the service answers (`POST /v1/reindex`) against one with it stopped
(`vifusion reindex`), on the same library, and what searches cost meanwhile.

Work: the demo videos written ``--copies`` times (each copy a video of its own), uploaded to a
``Service`` (real Ray, default model) and indexed. Then, in one process, as a client would:
text searches back to back for ``--idle-s`` (the baseline latencies); ``Service.reindex``
with the same default model (real weights: the cost a user pays), searches going on until
it reports ready, each latency labelled by the phase it ran in (embedding, switching). The
service then stops and `reindex` (the command's function, writer lock held) embeds the same
library again: the baseline's wall time, during which no search can be answered.

Prints the live reindex's wall seconds, frames and frames/s beside the stopped one's and the
ratio; searches' p50 / p99 / max idle and during, and the ratio of their p50; searches that
failed or came back empty (aim: none).

Run:  .venv/bin/python benchmarks/reindex_live.py [--quick]
It ends with one line of JSON holding every figure.
"""

from __future__ import annotations

import itertools
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import arguments, report_head, run_benchmark  # noqa: E402

from vifusion.ingest.live_reindex import _GRACE_S  # noqa: E402

QUERIES = ["a cat", "a rocket launch", "a coffee cup", "people", "a street", "an astronaut"]


def _percentiles(ms: list[float]) -> dict:
    if not ms:
        return {"n": 0}
    a = np.asarray(ms)
    return {
        "n": len(ms),
        "p50_ms": round(float(np.percentile(a, 50)), 2),
        "p99_ms": round(float(np.percentile(a, 99)), 2),
        "max_ms": round(float(a.max()), 2),
    }


def main() -> int:
    ap = arguments(__doc__, quick="one copy of the demo videos and 10 s idle")
    ap.add_argument("--copies", type=int, default=None, help="copies of the demo videos")
    ap.add_argument("--idle-s", type=float, default=None, help="seconds of idle searches")
    args = ap.parse_args()
    copies = args.copies or (1 if args.quick else 4)
    idle_s = args.idle_s or (10.0 if args.quick else 30.0)

    from vifusion.config import Config
    from vifusion.ingest.reindex import reindex
    from vifusion.samples import write_demo_set
    from vifusion.service import Service

    report = report_head("reindex_live", args.quick)
    root = Path(tempfile.mkdtemp(prefix="vf-reindex-"))
    try:
        demo = write_demo_set(root / "videos")
        cfg = Config(data_dir=root / "data")
        with Service(cfg) as svc:
            jobs = []
            for i, video in itertools.product(range(copies), demo):
                with open(video.path, "rb") as f:
                    jobs.append(svc.ingest_upload(f, f"{i}-{video.name}"))
            for queued in jobs:
                while (status := svc.job(queued.job_id).status) not in ("ready", "failed"):
                    time.sleep(0.5)
                if status != "ready":
                    raise RuntimeError(f"{queued}: {svc.job(queued.job_id).error}")
            report["videos"] = len(jobs)

            latencies: dict[str, list[float]] = {"idle": [], "embedding": [], "switching": []}
            bad = {"errors": 0, "empty": 0}
            empty: dict[str, list[str]] = {"idle": [], "embedding": [], "switching": []}
            # the queries that find something before: an empty answer later is the reindex's
            queries = itertools.cycle([q for q in QUERIES if svc.search(text=q).results])

            def one(phase: str) -> None:
                t0 = time.perf_counter()
                try:
                    query = next(queries)
                    found = svc.search(text=query, top_k=10).results
                except Exception as e:  # counted, never expected
                    bad["errors"] += 1
                    print(f"search failed in {phase}: {e}", file=sys.stderr)
                    return
                latencies[phase].append((time.perf_counter() - t0) * 1000)
                if not found:
                    bad["empty"] += 1
                    empty[phase].append(query)

            end = time.monotonic() + idle_s
            while time.monotonic() < end:
                one("idle")
            t0 = time.perf_counter()
            svc.reindex()
            phases = {"embedding": 0.0, "switching": 0.0}
            while (state := svc.reindex_state())["state"] in phases:
                t1 = time.perf_counter()
                one(state["state"])
                phases[state["state"]] += time.perf_counter() - t1
            live_s = time.perf_counter() - t0
            if state["state"] != "ready":
                raise RuntimeError(f"the live reindex failed: {state['error']}")
            report["live"] = {
                "seconds": round(live_s, 2),
                "frames": state["frames"],
                "frames_per_s": round(state["frames"] / live_s, 2),
                "phase_s": {k: round(v, 2) for k, v in phases.items()},
            }
            report["empty_by_phase"] = {k: sorted(set(v)) for k, v in empty.items() if v}
        t0 = time.perf_counter()
        done = reindex(cfg)
        stopped_s = time.perf_counter() - t0
        report["stopped"] = {
            "seconds": round(stopped_s, 2),
            "frames": done.frames,
            "frames_per_s": round(done.frames / stopped_s, 2),
        }
        report["searches"] = {phase: _percentiles(ms) for phase, ms in latencies.items()}
        report["searches"] |= bad
        during = latencies["embedding"] + latencies["switching"]
        idle_p50 = float(np.percentile(latencies["idle"], 50))
        during_p50 = float(np.percentile(during, 50)) if during else float("nan")
        report["search_p50_during_over_idle"] = round(during_p50 / idle_p50, 2)
        report["live_over_stopped_seconds"] = round(live_s / stopped_s, 2)

        print(
            f"reindex, service stopped: {stopped_s:.1f} s, {done.frames} frames "
            f"({report['stopped']['frames_per_s']} frames/s); no search answered meanwhile"
        )
        print(
            f"reindex, service running: {live_s:.1f} s, {state['frames']} frames "
            f"({report['live']['frames_per_s']} frames/s); x{report['live_over_stopped_seconds']}"
            f" the stopped one's time; seconds embedding / switching (with the old set's"
            f" {_GRACE_S:.0f} s): {report['live']['phase_s']}"
        )
        for phase, figures in report["searches"].items():
            if isinstance(figures, dict):
                print(f"searches {phase}: {figures}")
        print(
            f"search p50 during / idle: x{report['search_p50_during_over_idle']}; "
            f"failed {bad['errors']}, empty {bad['empty']} (aim: none) "
            f"{report.get('empty_by_phase', '')}"
        )
        print(json.dumps(report))
        return 0 if bad["errors"] == 0 and bad["empty"] == 0 else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    run_benchmark(main, "reindex_live")
