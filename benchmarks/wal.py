"""The shard's write-ahead log: appends of fused batches, each fdatasync'ed before it counts
as acknowledged, with the log's synced pages dropped from the page cache after each sync
(``vifusion.index.wal``) against the same log keeping them cached (the kernel's default).

Work: real-size batches (75 frames of 6.6 KB, about 500 KB: what the node aggregator sends
at 1 Gbit) appended one after another to a fresh log in a temporary directory on the data
disk, the two variants alternating (each round the other goes first), each log kept to the
end as a shard keeps its log until the next snapshot. The page cache's cost shows once it
holds some hundreds of MB: on this VM a write into it costs ten times as much from then on.
Printed per variant: appends/s, MB/s, and per append the p50 / p90 of the whole append
and of its write call alone (the copy into the page cache: what dropping the pages saves;
the fdatasync is the same either way).

Run:  .venv/bin/python benchmarks/wal.py [--quick] [--dir PATH]
It ends with one line of JSON holding every figure.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import arguments, report_head, run_benchmark  # noqa: E402

from vifusion.index import wal as wal_module  # noqa: E402
from vifusion.index.wal import WriteAheadLog  # noqa: E402
from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FusedBatch, vector_id  # noqa: E402

ROWS = 75


class _TimedFile:
    """The log's file, with its write calls timed (everything else passes through)."""

    def __init__(self, f, writes: list[float]) -> None:
        self._f, self._writes = f, writes

    def write(self, b: bytes) -> int:
        t = time.perf_counter()
        n = self._f.write(b)
        self._writes[-1] += time.perf_counter() - t
        return n

    def __getattr__(self, name: str):
        return getattr(self._f, name)


def run(directory: Path, batches: list[FusedBatch], uncache: bool) -> dict:
    """Append every batch to a fresh log; ``uncache``: as the product does."""
    log = WriteAheadLog(directory)
    if not uncache:
        log._uncache = lambda f, end: None  # the baseline: the kernel's default, pages stay cached
    appends: list[float] = []
    writes: list[float] = []
    t0 = time.perf_counter()
    for b in batches:
        if log._file is not None and not isinstance(log._file, _TimedFile):
            log._file = _TimedFile(log._file, writes)
        writes.append(0.0)
        t = time.perf_counter()
        log.append(b)
        appends.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - t0
    log.close()
    nbytes = sum(b.nbytes for b in batches)
    a, w = np.array(appends) * 1e3, np.array(writes[1:]) * 1e3  # the first opened the segment
    return {
        "appends_per_s": len(batches) / elapsed,
        "mb_per_s": nbytes / elapsed / 1e6,
        "append_p50_ms": float(np.median(a)),
        "append_p90_ms": float(np.percentile(a, 90)),
        "write_p50_ms": float(np.median(w)),
        "write_p90_ms": float(np.percentile(w, 90)),
    }


def main() -> int:
    ap = arguments(__doc__, quick="fewer appends (under a minute)")
    ap.add_argument(
        "--dir", type=Path, default=None, help="where the logs go (default: a temporary directory)"
    )
    args = ap.parse_args()
    if wal_module._fadvise is None:
        print(
            "this platform has no posix_fadvise: the log keeps its pages cached either way",
            file=sys.stderr,
        )
        return 2
    n, rounds = (1500, 2) if args.quick else (2000, 3)
    rng = np.random.default_rng(0)
    pool = rng.standard_normal((4 * ROWS, VISUAL_DIM + SEMANTIC_DIM), dtype=np.float32)
    batches = []
    for i in range(n):
        ids = np.array(
            [vector_id(1 + i // 100, (i % 100) * ROWS + j) for j in range(ROWS)], np.int64
        )
        at = (i % 4) * ROWS
        batches.append(
            FusedBatch(ids, np.zeros((ROWS, 2), np.float32), pool[at : at + ROWS].copy())
        )
    print(f"{rounds} rounds of {n} appends of {batches[0].nbytes / 1e3:.0f} KB, each fdatasync'ed")
    results: dict[str, list[dict]] = {"cached": [], "uncached": []}
    with tempfile.TemporaryDirectory(prefix="vf-wal-bench-", dir=args.dir) as tmp:
        for r in range(rounds):
            for name in ("cached", "uncached")[:: 1 if r % 2 == 0 else -1]:
                out = run(Path(tmp) / f"{name}-{r}", batches, uncache=name == "uncached")
                results[name].append(out)
                print(
                    f"  round {r + 1} {name:8s} {out['appends_per_s']:7.0f} appends/s  {out['mb_per_s']:6.1f} MB/s"
                    f"  append p50 {out['append_p50_ms']:.3f} ms p90 {out['append_p90_ms']:.3f}"
                    f"  write p50 {out['write_p50_ms']:.3f} ms p90 {out['write_p90_ms']:.3f}"
                )
    med = {
        name: {k: float(np.median([o[k] for o in outs])) for k in outs[0]}
        for name, outs in results.items()
    }
    for name, m in med.items():
        print(
            f"{name:8s} (median of rounds) {m['appends_per_s']:7.0f} appends/s  {m['mb_per_s']:6.1f} MB/s"
            f"  append p50 {m['append_p50_ms']:.3f} ms  write p50 {m['write_p50_ms']:.3f} ms"
        )
    ratios = {
        "appends_uncached_over_cached": round(
            med["uncached"]["appends_per_s"] / med["cached"]["appends_per_s"], 3
        ),
        "write_p50_uncached_over_cached": round(
            med["uncached"]["write_p50_ms"] / med["cached"]["write_p50_ms"], 3
        ),
    }
    print("ratios:", ratios)
    print(
        json.dumps(
            report_head("wal", args.quick)
            | {
                "rows_per_append": ROWS,
                "appends": n,
                "rounds": rounds,
                "results": med,
                "ratios": ratios,
            }
        )
    )
    return 0


if __name__ == "__main__":
    run_benchmark(main, "wal benchmark")
