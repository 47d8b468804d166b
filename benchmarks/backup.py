"""`vifusion backup` and `vifusion restore` against a plain copy of the same data dir, and
searches' p50 while a backup runs against without.

Work: a data dir made here (SQLite catalog, 2 shards of real snapshots and logs written by
``Shard``, one stored upload of random bytes per video, the keys): ``--quick`` about 60 MB,
else about 300 MB. Timed on the same data dir, each into a fresh folder on the same disk:
``shutil.copytree`` (the baseline: a plain copy, not consistent beside a writer), ``backup``
(copy + SHA-256 of every file + the shards' capture; in a process of its own at
the CPU priority `vifusion backup` takes, ``BACKUP_NICE``), ``restore`` (SHA-256 check of every
file + copy). MB/s = the data dir's bytes / wall seconds. Searches: a separate process (as a
shard actor is) holds both shards loaded and searches them back to back with random visual
queries (top 10); its latencies are split into those before the backup and those while it
runs; the ratio of their p50 is the figure (aim: within 1.5x).

Run:  .venv/bin/python benchmarks/backup.py [--quick]
It ends with one line of JSON holding every figure.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
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

from vifusion.catalog import open_catalog  # noqa: E402
from vifusion.cli.backup import BACKUP_NICE, backup  # noqa: E402
from vifusion.cli.restore import restore  # noqa: E402
from vifusion.config import Config  # noqa: E402
from vifusion.datadir import API_KEY, MEDIA, REPLICATION_KEY  # noqa: E402
from vifusion.index.layout import check_layout, shard_dir  # noqa: E402
from vifusion.index.shard import Shard  # noqa: E402
from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FusedBatch  # noqa: E402

SHARDS = 2
FRAMES = 150  # per video
MEDIA_BYTES = 1 << 20  # per video's stored upload


def build(data: Path, videos: int) -> Config:
    """A data dir of ``videos`` ready videos: vectors in the shards, an upload each."""
    cfg = Config(data_dir=data, num_shards=SHARDS, snapshot_log_bytes=16 << 20)
    check_layout(data, SHARDS)
    catalog = open_catalog(cfg)
    shards = [Shard(n, shard_dir(data, n), cfg, writer=True) for n in range(SHARDS)]
    rng = np.random.default_rng(0)
    for i in range(videos):
        folder = data / MEDIA / f"{i:032x}"
        folder.mkdir(parents=True)
        (folder / "video.mp4").write_bytes(rng.bytes(MEDIA_BYTES))
        video_id, job_id = catalog.add_video(
            f"upload:{i}", f"video {i}", media=folder / "video.mp4"
        )
        vis = rng.standard_normal((FRAMES, VISUAL_DIM)).astype(np.float32)
        sem = rng.standard_normal((FRAMES, SEMANTIC_DIM)).astype(np.float32)
        spans = np.stack([np.arange(FRAMES), np.arange(1, FRAMES + 1)], 1)
        shards[video_id % SHARDS].add(FusedBatch.of_video(video_id, 0, spans, vis, sem))
        catalog.update_job(job_id, "ready", frames_indexed=FRAMES)
    for shard in shards[: SHARDS // 2]:
        shard.snapshot()  # one shard from its snapshot, the other from its log
    catalog.close()
    (data / API_KEY).write_text("k" * 43)
    (data / REPLICATION_KEY).write_text("r" * 43)
    return cfg


def searcher(data: str, ready, stop, out) -> None:
    """Search the data dir's shards back to back until ``stop``: (time, seconds) each."""
    from vifusion.index.local import LocalShards

    shards = LocalShards(Config(data_dir=Path(data), num_shards=SHARDS))
    rng = np.random.default_rng(1)
    found = []
    ready.set()
    while not stop.is_set():
        q = rng.standard_normal((1, VISUAL_DIM)).astype(np.float32)
        q /= np.linalg.norm(q)
        t0 = time.perf_counter()
        shards.search("visual", q, 10)
        found.append((time.time(), time.perf_counter() - t0))
    out.put(found)


def backed_up(cfg: Config, dest: Path, out) -> None:
    """Back up as `vifusion backup` does (its own process, at its CPU priority): (start, s)."""
    os.nice(BACKUP_NICE)
    began, t0 = time.time(), time.perf_counter()
    backup(cfg, dest)
    out.put((began, time.perf_counter() - t0))


def size_of(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> int:
    args = arguments(__doc__, "about 70 MB instead of about 350 MB").parse_args()
    videos = 40 if args.quick else 200
    work = Path(tempfile.mkdtemp(prefix="vifusion-bench-backup-", dir=os.environ.get("TMPDIR")))
    try:
        data = work / "data"
        cfg = build(data, videos)
        mb = size_of(data) / 1e6
        print(f"data dir: {videos} videos, {mb:.1f} MB")
        timed = {}
        t0 = time.perf_counter()
        shutil.copytree(data, work / "plain")
        timed["copytree"] = time.perf_counter() - t0
        os.sync()
        ctx = mp.get_context("spawn")
        ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
        proc = ctx.Process(target=searcher, args=(str(data), ready, stop, out))
        proc.start()
        ready.wait()
        time.sleep(3.0)  # searches without a backup
        backer = ctx.Process(target=backed_up, args=(cfg, work / "bk", out))
        backer.start()
        began, timed["backup"] = out.get()
        ended = began + timed["backup"]
        backer.join()
        stop.set()
        lat = out.get()
        proc.join()
        t0 = time.perf_counter()
        restore(Config(data_dir=work / "new", num_shards=SHARDS), work / "bk")
        timed["restore"] = time.perf_counter() - t0
        idle = [s for t, s in lat if t < began]
        during = [s for t, s in lat if began <= t <= ended]
        p50 = {
            "without_ms": round(float(np.median(idle)) * 1e3, 3),
            "during_backup_ms": round(float(np.median(during)) * 1e3, 3),
        }
        rates = {k: round(mb / v, 1) for k, v in timed.items()}
        ratios = {
            "backup_over_copytree": round(rates["backup"] / rates["copytree"], 3),
            "restore_over_copytree": round(rates["restore"] / rates["copytree"], 3),
            "search_p50_during_over_without": round(p50["during_backup_ms"] / p50["without_ms"], 3),
        }
        for k, v in timed.items():
            print(f"{k:9s} {v:6.2f} s  {rates[k]:7.1f} MB/s")
        print(
            f"search p50: {p50['without_ms']:.2f} ms without ({len(idle)} searches), "
            f"{p50['during_backup_ms']:.2f} ms during the backup ({len(during)} searches)"
        )
        print("ratios:", ratios)
        print(
            json.dumps(
                report_head("backup", args.quick)
                | {
                    "videos": videos,
                    "data_mb": round(mb, 1),
                    "seconds": {k: round(v, 3) for k, v in timed.items()},
                    "mb_per_s": rates,
                    "search_p50": p50,
                    "searches": {"without": len(idle), "during_backup": len(during)},
                    "ratios": ratios,
                }
            )
        )
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    run_benchmark(main, "backup benchmark")
