"""The shared-mask sparse codec's recall against its keep ratio, on the fusion benchmark's
real rows (issue 37): where it crosses the 0.99 gate, and whether the ladder should reach it.

The tables' pq codebooks are trained once on the rows ``benchmarks/fusion.py`` trains them
on; for each keep ratio only the masks are chosen again (``SharedTables.with_keep``). A
space's mask and scales are its own: each space is swept alone, the other at its default
share (``Config.codec_sparse_keep``), which also keeps sparse above pq on the ladder. Per
ratio:

- ``gate``: ``recall_at_k`` on the held-out training video, the worse space (what the
  fusion benchmark hands the aggregator as its tables' quality, and what the aggregator
  measures itself: the ladder uses a table codec only at ``Config.codec_min_recall`` or more);
- per space, ``frame``: frame-level recall@10 over the replayed pool's real frames (768, of
  videos the tables never saw), queries the benchmark's; ``video``: video-level recall@10 of
  ``--rows`` replayed rows (``make_rows``, what the fusion benchmark sends) stored sparse,
  against the same rows in fp32 (what that benchmark reports as ``recall_video_at_10``).

int8 is sparse keeping every dim of both spaces, given for reference. The ladder should
reach sparse on these features only at a keep where the gate passes and its bytes are well
under int8's (1672 a row): the JSON gives the cheapest pair where each measure reaches the
gate in both spaces, its bytes and its gate.

Run:  .venv/bin/python benchmarks/sparse_keep.py [--quick]
It ends with one line of JSON.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import arguments, report_head, run_benchmark
from fusion import FRAMES_PER_SOURCE, K, _source, make_rows, real_rows

from vifusion.comm import Ladder, SharedTables
from vifusion.comm.codec import Codec, recall_at_k
from vifusion.config import Config
from vifusion.types import SEMANTIC_DIM, VISUAL_DIM

GATE = Config().codec_min_recall
SPACES = {"visual": (0, VISUAL_DIM), "semantic": (VISUAL_DIM, VISUAL_DIM + SEMANTIC_DIM)}
KEEPS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def _top(q: np.ndarray, db: np.ndarray) -> np.ndarray:
    return np.argsort(-(q @ db.T), axis=1)[:, :K]


def recall(
    space: str, codec: Codec, r: dict, ids: np.ndarray, exact: np.ndarray
) -> dict[str, float]:
    """One space's frame-level recall@10 over the pool's real frames and video-level recall@10
    over the replayed rows, stored through ``codec``, against fp32."""
    lo, hi = SPACES[space]
    q = r["queries"][:, lo:hi]
    pool = codec.decode(codec.encode(r["pool"]))[:, lo:hi]
    frame = np.mean(
        [
            len(set(a) & set(b)) / K
            for a, b in zip(_top(q, r["pool"][:, lo:hi]), _top(q, pool), strict=True)
        ]
    )
    sources = len(r["pool"]) // FRAMES_PER_SOURCE
    got = _top(q, codec.decode(codec.encode(exact))[:, lo:hi])
    video = np.mean(
        [
            len(set(_source(ids[b], sources)) & set(_source(ids[a], sources)))
            / len(set(_source(ids[a], sources)))
            for a, b in zip(_top(q, exact[:, lo:hi]), got, strict=True)
        ]
    )
    return {"frame": round(float(frame), 4), "video": round(float(video), 4)}


def main() -> int:
    ap = arguments(__doc__, quick="fewer replayed rows (5,000)")
    ap.add_argument(
        "--rows", type=int, default=20_000, help="replayed rows stored (default %(default)s)"
    )
    args = ap.parse_args()
    rows = 5_000 if args.quick else args.rows
    r = real_rows()
    t0 = time.perf_counter()
    base = SharedTables.train(r["train"])
    train_s = time.perf_counter() - t0
    ids, exact = make_rows(r["pool"], r["next_row"], 0, rows)
    default = Config().codec_sparse_keep

    def sparse(pair: tuple[float, float]) -> tuple[Codec, float]:
        tables = base.with_keep(r["train"], pair)
        return Ladder(tables).get("sparse"), recall_at_k(Ladder(tables), r["held_out"])["sparse"]

    curves: dict[str, list[dict]] = {}
    for i, space in enumerate(SPACES):
        curves[space] = []
        for keep in KEEPS:  # this space's share; the other at its default
            pair = (keep, default[1]) if i == 0 else (default[0], keep)
            codec, gate = sparse(pair)
            point = {
                "keep": keep,
                "pair": list(pair),
                "bytes_per_row": codec.bytes_per_row,
                "gate": round(gate, 4),
                **recall(space, codec, r, ids, exact),
            }
            curves[space].append(point)
            print(
                f"  {space:8s} keep {keep:4.2f} (pair {pair[0]:.2f},{pair[1]:.2f}, {codec.bytes_per_row:4d} B/row)"
                f"  frame {point['frame']:.3f}  video {point['video']:.3f}  gate {gate:.3f}",
                flush=True,
            )
    int8 = Ladder().get("int8")
    reference = {
        "bytes_per_row": int8.bytes_per_row,
        "gate": round(recall_at_k(Ladder(), r["held_out"])["int8"], 4),
        **{s: recall(s, int8, r, ids, exact) for s in SPACES},
    }
    print(f"  int8 {reference}", flush=True)
    crosses = {
        s: {m: next((p["keep"] for p in c if p[m] >= GATE), None) for m in ("frame", "video")}
        for s, c in curves.items()
    }
    report = report_head("sparse_keep", args.quick) | {
        "rows": rows,
        "tables_train_s": round(train_s, 1),
        "gate": GATE,
        "curves": curves,
        "int8": reference,
        "crosses": crosses,
    }
    _, report["default_gate"] = sparse(default)
    report["default_keep"] = list(default)
    report["ladder_uses_default"] = report["default_gate"] >= GATE
    for measure in (
        "video",
        "frame",
    ):  # the cheapest pair where the measure reaches the gate in both spaces
        pair = tuple(crosses[s][measure] for s in SPACES)
        if None in pair or pair == (1.0, 1.0):
            report[f"{measure}_keep"] = None  # only int8 (every dim) reaches it
            continue
        codec, gate = sparse(pair)
        report[f"{measure}_keep"] = {
            "pair": list(pair),
            "bytes_per_row": codec.bytes_per_row,
            "bytes_over_int8": round(codec.bytes_per_row / int8.bytes_per_row, 3),
            "gate": round(gate, 4),
            "ladder_uses_it": gate >= GATE,
        }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    run_benchmark(main, "sparse keep benchmark")
