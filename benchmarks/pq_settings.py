"""Recall of a compressed space at N frames by its code: FAISS factories, nprobe and re-ranking
depth, on the same vectors and queries in one run, against exact search.

A compressed space (``vifusion.index.space``) is ``IVF{nlist},PQ{m}`` trained as the shard
trains it (``space._trained``: a sample of at most 131,072, 10 k-means iterations), its top
``k * refine`` candidates re-scored with their exact fp16 vectors. ``search.py`` measures that
through the shard actors; this script takes FAISS alone, so several codes can be compared on
ten million vectors in one run (the shard's build takes hours a code).

Workload: one space (``--space``, semantic by default) of ``search.py``'s ``scenes`` workload
(a million distinct 10-frame scenes fitted to real frames), its 200 queries built as
``search.py`` builds them (text: MiniLM vectors of "a photo of a <ImageNet class>"; visual:
real frames with noise). The exact vectors stay in memory as fp16 (7.7 GB for ten million
semantic ones).

For each factory (``--factories``; the first is the baseline, the product's): training and
adding time, bytes a vector (codes and ids), then for each nprobe x refine (``--grid``)
recall@10 and the ms a query of the index's search on one thread, in one batch of every
query and one query a call (re-ranking not timed: it reads memory here, the disk in a shard).

Run:  .venv/bin/python benchmarks/pq_settings.py                       # 10M semantic: 6 min to draw, 10-20 a code
      .venv/bin/python benchmarks/pq_settings.py --n 1000000 --space visual
It ends with one line of JSON holding every figure.
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

from vifusion.index.space import _trained  # noqa: E402
from vifusion.types import VISUAL_DIM  # noqa: E402

K = 10
_ALONE = 50  # queries also searched one a call


def vectors(workload, n_chunks: int, space: str) -> np.ndarray:
    """The space's columns of every chunk, fp16 (n, d)."""
    lo, hi = (0, VISUAL_DIM) if space == "visual" else (VISUAL_DIM, None)
    rows = search.FRAMES_PER_VIDEO
    first = workload.features(0)[:, lo:hi]
    out = np.empty((n_chunks * rows, first.shape[1]), np.float16)
    out[:rows] = first
    for c in range(1, n_chunks):
        out[c * rows : (c + 1) * rows] = workload.features(c)[:, lo:hi]
    return out


def exact(queries: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Exact top-K ids per query, in pieces of a million rows."""
    best_s = np.full((len(queries), K), -np.inf, np.float32)
    best_i = np.zeros((len(queries), K), np.int64)
    for at in range(0, len(x), 1 << 20):
        s = queries @ x[at : at + (1 << 20)].astype(np.float32).T
        ids = np.broadcast_to(np.arange(at, at + s.shape[1]), s.shape)
        s, ids = np.concatenate([best_s, s], 1), np.concatenate([best_i, ids], 1)
        top = np.argpartition(-s, K - 1, axis=1)[:, :K]
        best_s, best_i = np.take_along_axis(s, top, 1), np.take_along_axis(ids, top, 1)
    return best_i


def measure(factory: str, x: np.ndarray, queries, truth, grid) -> dict:
    d = x.shape[1]
    t0 = time.perf_counter()
    index = _trained(d, factory, len(x), lambda take: x[take].astype(np.float32), seed=0)
    train_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for at in range(0, len(x), 1 << 16):
        piece = x[at : at + (1 << 16)].astype(np.float32)
        index.add_with_ids(piece, np.arange(at, at + len(piece), dtype=np.int64))
    add_s = time.perf_counter() - t0
    ivf = faiss.extract_index_ivf(index)
    out = {
        "train_s": round(train_s, 1),
        "add_s": round(add_s, 1),
        "bytes_per_vector": ivf.code_size + 8,
    }
    faiss.omp_set_num_threads(1)
    for nprobe, refine in grid:
        params = faiss.SearchParametersIVF(nprobe=nprobe)
        t0 = time.perf_counter()
        _, cand = index.search(queries, K * refine, params=params)
        ms = (time.perf_counter() - t0) * 1000 / len(queries)
        t0 = time.perf_counter()
        for q in range(_ALONE):  # as one call per query searches
            index.search(queries[q : q + 1], K * refine, params=params)
        alone_ms = (time.perf_counter() - t0) * 1000 / _ALONE
        exact_s = np.einsum(
            "qcd,qd->qc", x[np.maximum(cand, 0)].astype(np.float32), queries, optimize=True
        )
        exact_s[cand < 0] = -np.inf
        top = np.take_along_axis(cand, np.argsort(-exact_s, axis=1)[:, :K], 1)
        recall = np.mean([len(set(a) & set(b)) / K for a, b in zip(top, truth)])
        out[f"{nprobe}x{refine}"] = {
            "recall_at_10": round(float(recall), 4),
            "ms": round(ms, 2),
            "alone_ms": round(alone_ms, 2),
        }
        print(
            f"  {factory:<24} nprobe {nprobe:>4} refine {refine:>4}: "
            f"recall@10 {recall:.4f}, {ms:.2f} ms a query in a batch of {len(queries)}, "
            f"{alone_ms:.2f} alone",
            flush=True,
        )
    faiss.omp_set_num_threads(2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--space", choices=("semantic", "visual"), default="semantic")
    ap.add_argument(
        "--factories",
        help="FAISS factory strings, ';' between them, the baseline first, {nlist} for the "
        "shard's list count (default: by space)",
    )
    ap.add_argument("--grid", default="32x100,128x100,128x300", help="NPROBExREFINE,...")
    ap.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "vifusion-bench" / "search"
    )
    args = ap.parse_args()
    n_chunks = args.n // search.FRAMES_PER_VIDEO
    nlist = 1 << max(6, min(16, round(np.log2(2 * np.sqrt(args.n)))))  # IndexPolicy's
    default = (
        "IVF{nlist},PQ32;IVF{nlist},PQ48;IVF{nlist},PQ64;OPQ32,IVF{nlist},PQ32"
        if args.space == "semantic"
        else "IVF{nlist},PQ64;IVF{nlist},PQ128;OPQ64,IVF{nlist},PQ64"
    )
    factories = (args.factories or default).format(nlist=nlist).split(";")
    grid = [tuple(int(v) for v in g.split("x")) for g in args.grid.split(",")]

    base = search.real_features(args.cache, 12)
    workload = search.Scenes(base)
    rng = np.random.default_rng(3)  # as search.py draws its queries
    from vifusion.extract.model import Embedder, imagenet_class_names

    names = imagenet_class_names()
    texts = [f"a photo of a {names[i]}" for i in rng.choice(len(names), 200, replace=False)]
    text_q = Embedder(cache_dir=args.cache / "models").embed_text(texts).astype(np.float32)
    rows = rng.choice(len(base[0]), 200, replace=False)
    noise = rng.standard_normal((200, VISUAL_DIM), dtype=np.float32)
    img_q = search._unit(base[0][rows] + noise * (search.NOISE / np.sqrt(VISUAL_DIM)))
    queries = np.ascontiguousarray(text_q if args.space == "semantic" else img_q)

    t0 = time.perf_counter()
    x = vectors(workload, n_chunks, args.space)
    print(f"{len(x):,} {args.space} vectors drawn ({time.perf_counter() - t0:.0f} s)", flush=True)
    truth = exact(queries, x)
    report: dict = {
        "benchmark": "pq_settings",
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "n": args.n,
        "space": args.space,
        "workload": "scenes",
        "factories": {},
    }
    for f in factories:
        report["factories"][f] = measure(f, x, queries, truth, grid)
    print()
    print(f"recall@10 of {args.n:,} {args.space} vectors (scenes), ms a query (index, 1 thread)")
    head = "".join(f"{'%dx%d' % g:>18}" for g in grid)
    print(f"{'factory':<26}{'bytes':>6}{head}")
    for f, r in report["factories"].items():
        cells = "".join(
            f"{r['%dx%d' % g]['recall_at_10']:>10.4f}{r['%dx%d' % g]['ms']:>7.1f}ms" for g in grid
        )
        print(f"{f:<26}{r['bytes_per_vector']:>6}{cells}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
