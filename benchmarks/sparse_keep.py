"""The shared-mask sparse codec's recall against its keep ratio, on the fusion benchmark's
real rows (issue 37): where it crosses the 0.99 gate, and whether the ladder should reach it.

The tables' pq codebooks are trained once on the rows ``benchmarks/fusion.py`` trains them
on; for each keep ratio only the masks are chosen again (``SharedTables.with_keep``). A
space's mask and scales are its own, so one ratio given to both spaces gives both curves.
Per ratio:

- ``gate``: ``recall_at_k`` on the held-out training video, the worse space (what the
  fusion benchmark hands the aggregator as its tables' quality, and what the aggregator
  measures itself: the ladder uses a table codec only at ``Config.codec_min_recall`` or more);
- per space, ``frame``: frame-level recall@10 over the replayed pool's real frames (768, of
  videos the tables never saw), queries the benchmark's; ``video``: video-level recall@10 of
  ``--rows`` replayed rows (``make_rows``, what the fusion benchmark sends) stored sparse,
  against the same rows in fp32 (what that benchmark reports as ``recall_video_at_10``).

int8 is the limit of keep 1.0 (the kept dims travel as int8) and is given for reference.
The ladder should reach sparse on these features only at a keep where the gate passes and
its bytes are well under int8's (1672 a row).

Run:  .venv/bin/python benchmarks/sparse_keep.py [--quick]
It ends with one line of JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, run_benchmark
from fusion import FRAMES_PER_SOURCE, K, _source, make_rows, real_rows

from vifusion.comm import Ladder, SharedTables
from vifusion.comm.codec import recall_at_k
from vifusion.config import Config
from vifusion.types import SEMANTIC_DIM, VISUAL_DIM

GATE = Config().codec_min_recall
SPACES = {"visual": (0, VISUAL_DIM), "semantic": (VISUAL_DIM, VISUAL_DIM + SEMANTIC_DIM)}
KEEPS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def _top(q: np.ndarray, db: np.ndarray) -> np.ndarray:
    return np.argsort(-(q @ db.T), axis=1)[:, :K]


def recalls(decoded: np.ndarray, exact: np.ndarray, queries: np.ndarray, frames: np.ndarray,
            frames_decoded: np.ndarray, ids: np.ndarray, sources: int) -> dict[str, dict[str, float]]:
    """Per space: frame-level recall@10 over ``frames``, video-level over the replayed rows."""
    out = {}
    for space, (lo, hi) in SPACES.items():
        q = queries[:, lo:hi]
        f_exact, f_got = _top(q, frames[:, lo:hi]), _top(q, frames_decoded[:, lo:hi])
        frame = np.mean([len(set(a) & set(b)) / K for a, b in zip(f_exact, f_got, strict=True)])
        v_exact, v_got = _top(q, exact[:, lo:hi]), _top(q, decoded[:, lo:hi])
        video = np.mean([len(set(_source(ids[b], sources)) & set(_source(ids[a], sources)))
                         / len(set(_source(ids[a], sources))) for a, b in zip(v_exact, v_got, strict=True)])
        out[space] = {"frame": round(float(frame), 4), "video": round(float(video), 4)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer replayed rows (5,000)")
    ap.add_argument("--rows", type=int, default=20_000, help="replayed rows stored (default %(default)s)")
    args = ap.parse_args()
    rows = 5_000 if args.quick else args.rows
    r = real_rows()
    t0 = time.perf_counter()
    base = SharedTables.train(r["train"])
    train_s = time.perf_counter() - t0
    ids, exact = make_rows(r["pool"], r["next_row"], 0, rows)
    sources = len(r["pool"]) // FRAMES_PER_SOURCE
    int8 = Ladder().get("int8")
    curve = []
    for keep in (*KEEPS, 1.0):
        if keep < 1.0:
            tables = base.with_keep(r["train"], keep)
            codec = Ladder(tables).get("sparse")
            gate = recall_at_k(Ladder(tables), r["held_out"])["sparse"]
        else:  # keep 1.0 is int8
            codec, gate = int8, recall_at_k(Ladder(), r["held_out"])["int8"]
        point = {"keep": keep, "codec": codec.name, "bytes_per_row": codec.bytes_per_row, "gate": round(gate, 4),
                 **recalls(codec.decode(codec.encode(exact)), exact, r["queries"], r["pool"],
                           codec.decode(codec.encode(r["pool"])), ids, sources)}
        curve.append(point)
        print(f"  keep {keep:4.2f}  {codec.bytes_per_row:5d} B/row  gate {gate:.3f}  "
              + "  ".join(f"{s} frame/video {point[s]['frame']:.3f}/{point[s]['video']:.3f}" for s in SPACES),
              flush=True)
    default = Config().codec_sparse_keep
    default_gate = recall_at_k(Ladder(base.with_keep(r["train"], default)), r["held_out"])["sparse"]
    report = {"benchmark": "sparse_keep", "quick": args.quick, "machine": machine(),
              "date": time.strftime("%Y-%m-%d"), "rows": rows, "tables_train_s": round(train_s, 1),
              "gate": GATE, "curve": curve, **crossings(curve), "default_keep": list(default),
              "default_gate": round(default_gate, 4), "ladder_uses_default": default_gate >= GATE}
    print(json.dumps(report))
    return 0


def crossings(curve: list[dict]) -> dict:
    """Where each measure first reaches the gate per space (None: not below keep 1.0), and
    the cheapest keep pair whose video recall reaches it in both spaces."""
    sparse = [p for p in curve if p["codec"] == "sparse"]
    out: dict = {"crosses": {}}
    for space, d in zip(SPACES, (VISUAL_DIM, SEMANTIC_DIM), strict=True):
        out["crosses"][space] = {m: next((p["keep"] for p in sparse if p[space][m] >= GATE), None)
                                 for m in ("frame", "video")}
    pair = [out["crosses"][s]["video"] for s in SPACES]
    if None not in pair:
        kept = sum(max(1, round(k * d)) for k, d in zip(pair, (VISUAL_DIM, SEMANTIC_DIM), strict=True))
        out["video_keep"] = pair
        out["video_keep_bytes_per_row"] = kept + 8
        out["video_keep_bytes_over_int8"] = round((kept + 8) / Ladder().get("int8").bytes_per_row, 3)
    out["gate_crosses_at"] = next((p["keep"] for p in sparse if p["gate"] >= GATE), None)
    return out


if __name__ == "__main__":
    run_benchmark(main, "sparse keep benchmark")
