"""Several extractors on one node: each with a thread a core (as before) or its share.

Two runs of the real indexing path (``Runtime(cfg, writer=True).indexer.index_files``, as
``extract.py`` runs it) over the same videos, 4 frames kept a second (so that embedding, not
decoding, takes most of the CPU), with ``num_extractors`` extractors on this one machine, one
run after the other:

1. **Baseline**: every extractor sets torch to one thread per core of the machine
   (``torch_threads = Config.threads``), which is what each did before it counted the others.
2. **ViFusion**: ``torch_threads = 0``: each takes its share, ``Config.threads // extractors
   on its node`` (``extract/actor.py``).

Prints both, their ratio, and last one line of JSON. The workload is ``extract.py``'s (its
videos are cached under its ``--cache``).

    .venv/bin/python benchmarks/extractor_share.py            # 4 videos x 30 s, 2 extractors
    .venv/bin/python benchmarks/extractor_share.py --quick    # 2 videos x 20 s
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
from pathlib import Path

import ray
from _common import machine  # benchmarks/ is on sys.path when a script here runs
from extract import BATCH, bench_vifusion, make_workload

from vifusion.config import Config


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2 videos x 20 s")
    p.add_argument("--extractors", type=int, default=2)
    p.add_argument("--sample-fps", type=float, default=4.0, help="frames kept a second")
    p.add_argument("--cache", type=Path, default=Path("/tmp/vifusion-bench/extract"))
    args = p.parse_args()
    num_videos, seconds = (2, 20.0) if args.quick else (4, 30.0)
    base = Config(
        embed_batch=BATCH,
        num_extractors=args.extractors,
        sample_fps=args.sample_fps,
        speech=False,
        screen_text=False,
    )
    wl = make_workload(args.cache, num_videos, seconds, base)
    cores = base.threads
    print(
        f"workload: {len(wl.videos)} videos x {seconds:g} s, {wl.frames} frames sampled; "
        f"{args.extractors} extractors on {cores} cores",
        flush=True,
    )
    ray.init(
        num_cpus=os.cpu_count(),
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    try:
        each_all = bench_vifusion(base.model_copy(update={"torch_threads": cores}), wl)
        shared = bench_vifusion(base.model_copy(update={"torch_threads": 0}), wl)
    finally:
        ray.shutdown()
    share = max(1, cores // args.extractors)
    rows = [(f"a thread a core ({cores} each)", each_all), (f"its share ({share} each)", shared)]
    print(f"{'torch threads':<26}{'frames':>8}{'seconds':>10}{'frames/s':>10}")
    for name, r in rows:
        print(f"{name:<26}{r.frames:>8}{r.seconds:>10.2f}{r.fps:>10.1f}")
    ratio = shared.fps / each_all.fps
    print(f"share / a thread a core: {ratio:.2f}x")
    print(
        json.dumps(
            {
                "benchmark": "extractor_share",
                "quick": args.quick,
                "extractors": args.extractors,
                "cores": cores,
                "frames": wl.frames,
                "baseline_fps": round(each_all.fps, 2),
                "vifusion_fps": round(shared.fps, 2),
                "ratio": round(ratio, 3),
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "machine": machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
