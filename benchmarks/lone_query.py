"""A lone query on a trained shard: its inverted lists scanned by every FAISS thread (split by
list, ViFusion) against FAISS's default split by query, which leaves a lone query to one.

Opens, in this process and read-only, a shard folder that ``search.py --keep`` left (its
snapshot and vector files), with ``search.py``'s index settings, and draws ``search.py``'s
queries (text queries for the semantic space, noisy real frames for the visual one). For
each trained space, the same queries one a call, in one run:

- the space's FAISS search alone (``nprobe``, ``k * refine`` candidates), parallel mode 0
  (FAISS's default) and 1 (what ``SpaceIndex.search`` sets for one query), in turns;
- end to end through ``Shard.search`` (the PQ scan, the re-ranking's reads, the times).

Prints ms a query for both and the ratio, then one line of JSON.

Run:  .venv/bin/python benchmarks/lone_query.py --shard /var/tmp/vf10m/main/index/shard-0
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import search  # noqa: E402
from _common import machine  # noqa: E402

from vifusion.config import Config  # noqa: E402
from vifusion.index import Shard  # noqa: E402
from vifusion.types import VISUAL_DIM  # noqa: E402


def queries(cache: Path) -> dict[str, np.ndarray]:
    """``search.py``'s 200 text and 200 image queries."""
    base = search.real_features(cache, 12)
    rng = np.random.default_rng(3)
    from vifusion.extract.model import Embedder, imagenet_class_names

    names = imagenet_class_names()
    texts = [f"a photo of a {names[i]}" for i in rng.choice(len(names), 200, replace=False)]
    text_q = Embedder(cache_dir=cache / "models").embed_text(texts).astype(np.float32)
    rows = rng.choice(len(base[0]), 200, replace=False)
    noise = rng.standard_normal((200, VISUAL_DIM), dtype=np.float32)
    img_q = search._unit(base[0][rows] + noise * (search.NOISE / np.sqrt(VISUAL_DIM)))
    return {"semantic": np.ascontiguousarray(text_q), "visual": np.ascontiguousarray(img_q)}


def scan_ms(space, q: np.ndarray, mode: int) -> float:
    """ms a query of the space's FAISS search alone, one query a call, in parallel ``mode``."""
    ivf = faiss.extract_index_ivf(space.index)
    k = search.K * space.policy.refine if space.compressed else search.K
    params = faiss.SearchParametersIVF(nprobe=space.nprobe)
    ivf.parallel_mode = mode
    t0 = time.perf_counter()
    for i in range(len(q)):
        space.index.search(q[i : i + 1], k, params=params)
    return (time.perf_counter() - t0) * 1000 / len(q)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shard", type=Path, required=True, help="a shard-N folder search.py kept")
    ap.add_argument("--rounds", type=int, default=3, help="turns of each mode")
    ap.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "vifusion-bench" / "search"
    )
    args = ap.parse_args()
    qs = queries(args.cache)
    cfg = Config(
        data_dir=Path(tempfile.mkdtemp(prefix="vifusion-lone-")),
        faiss_threads=2,
        index_exact_max=50_000,  # search.py's settings for a full run
        index_compress_min=100_000,
    )
    t0 = time.perf_counter()
    shard = Shard(0, args.shard, cfg, writer=False)
    print(f"opened {shard.ntotal:,} frames in {time.perf_counter() - t0:.1f} s", flush=True)
    faiss.omp_set_num_threads(2)
    report: dict = {
        "benchmark": "lone_query",
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "frames": shard.ntotal,
        "spaces": {},
    }
    for name, q in qs.items():
        space = shard._spaces[name]
        if space.is_flat:
            continue
        for i in range(20):  # warm the pages the searches touch
            shard.search(name, q[i : i + 1], search.K)
        by_query, by_list = [], []
        for _ in range(args.rounds):
            by_query.append(scan_ms(space, q, 0))
            by_list.append(scan_ms(space, q, 1))
        lat = []
        for i in range(len(q)):
            t = time.perf_counter()
            shard.search(name, q[i : i + 1], search.K)
            lat.append((time.perf_counter() - t) * 1000)
        got = {
            "index": space.factory,
            "nprobe": space.nprobe,
            "scan_ms_by_query": round(min(by_query), 2),
            "scan_ms_by_list": round(min(by_list), 2),
            "scan_ratio": round(min(by_query) / min(by_list), 2),
            "shard_search_p50_ms": round(float(np.percentile(lat, 50)), 2),
            "shard_search_p99_ms": round(float(np.percentile(lat, 99)), 2),
        }
        report["spaces"][name] = got
        print(
            f"{name:<9} {space.factory}, nprobe {space.nprobe}: a lone query's scan "
            f"{got['scan_ms_by_query']} ms split by query (FAISS's default), "
            f"{got['scan_ms_by_list']} ms split by list: x{got['scan_ratio']}; "
            f"through the shard p50 {got['shard_search_p50_ms']} ms, "
            f"p99 {got['shard_search_p99_ms']} ms",
            flush=True,
        )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
