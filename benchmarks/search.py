"""Search at a million vectors: index build, size, recall, and query fusion against one FAISS
call per query, through the real shard actors.

Workload (one run):

1. **Real features.** Generated videos (``vifusion.samples``: the skimage photos panned and
   zoomed, and moving shapes) are decoded at 4 frames/s and embedded by ViFusion's
   extractor model (EfficientNet-Lite0 + ConSE): the ``visual`` (1280-d) and ``semantic``
   (384-d) vectors of a few thousand real frames. Cached in ``--cache``.
2. **Augmented to N frames** (1,000,000; ``--quick``: 100,000), per space, deterministic per
   chunk, so the exact ground truth is recomputed chunk by chunk instead of held
   (``--workload``): ``mixes``, frame g a random mix a*x_i + (1-a)*x_j of a real frame and
   the next frame of its video (a uniform in [0, 1]) plus Gaussian noise of norm 0.3,
   re-normalised (``Mixes``: near copies past a million); ``scenes``, distinct 10-frame
   scenes drawn from a Gaussian fitted to the real frames (``Scenes``).
   Frames are grouped 1000 to a synthetic video and routed to shards as ViFusion routes
   videos (``video_id % shards``).
3. **Build**: 4 shard actors (``--shards``; ``ShardSet``, 2 // shards FAISS threads each, at
   least one), batches of 1000 frames
   sent to the primaries with 8 in flight; every batch goes through the write-ahead log
   (fsynced) before it is acknowledged, and each shard turns its exact index into a trained
   ``IVF,SQfp16`` past ``index_exact_max`` (50,000; ``--quick``: 10,000) and into a
   compressed ``IVF,PQ`` with exact re-ranking from its vector files past
   ``index_compress_min`` (100,000; ``--quick``: 20,000; ``--compress-min``), in the
   background. Build time = first batch sent to every shard idle (all rebuilds done).
   ``bytes_per_frame`` = the shards' resident memory, both spaces (codes, ids,
   centroids, codebooks, id -> row maps; ``Shard.stats()["index_bytes"]``) and the id ->
   time table (``times_bytes``) / frames; the
   snapshot files and the vector files per frame are printed beside it. Training: the
   longest last rebuild of a shard per space, and the frames/s acknowledged while any ran.
4. **Recall@10** through ``ShardSet.search`` (fan-out, merge) against exact brute force over
   all N, for 200 text queries (semantic: MiniLM embeddings of "a photo of a <ImageNet
   class>") and 200 image queries (visual: real frames with fresh noise).
5. **Closed-loop load**: C client threads each send one text query at a time
   (``ShardSet.search("semantic", q, 10)``, precomputed query vectors: the index, not the
   text model, is measured) for D seconds: (a) query fusion off, one actor call and one
   FAISS call per query per shard (the baseline); (b) query fusion on. QPS, p50, p99; and
   one client alone (query batching on) for its p50.
   Then the shards are closed and started again on the same directories: restart-to-ready
   is the time until every shard answers a search (snapshot loaded, no re-training).
6. **Shards**: the fused load again on ``--scale-n`` frames (100,000; quick: 30,000) split
   over 1, 2 and 4 shards (the same data each time, IVF in every shard), to show how QPS changes with the shard
   count on this machine.

Aims (the issue's): recall@10 >= 0.95; (b) >= 4x (a)'s QPS at equal or lower p50.

Run:  .venv/bin/python benchmarks/search.py [--quick]
One shard of ten million (about two and a half hours here; 33 GB of vector files on disk),
kept to search again without building (``--reuse DIR``, the same other options; a space
whose code size differs from this run's settings is re-trained from its vector file first):
      .venv/bin/python benchmarks/search.py --n 10000000 --shards 1 --settle 1000000 \
          --workload scenes --keep /var/tmp/vf10m
It ends with one line of JSON holding every figure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FusedBatch, vector_id  # noqa: E402

FRAMES_PER_VIDEO = 1000
SCENE_FRAMES = 10
K = 10
NOISE = 0.3


# -- features -----------------------------------------------------------------------------


def real_features(cache: Path, n_videos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(visual, semantic, next_row): real frame features; next_row[i] is the row of the next
    frame of the same video (i itself for a video's last frame)."""
    path = cache / f"features-{n_videos}.npz"
    if path.exists():
        with np.load(path) as z:
            return z["visual"], z["semantic"], z["next_row"]
    import torch

    from vifusion.extract.decode import open_sampled
    from vifusion.extract.model import Embedder
    from vifusion.samples import MOTION, PHOTOS, write_video

    torch.set_num_threads(2)
    embedder = Embedder(cache_dir=cache / "models")
    names = [*PHOTOS, MOTION]
    visual, semantic, next_row = [], [], []
    rng = np.random.default_rng(7)
    for v in range(n_videos):
        photos = [names[i] for i in rng.choice(len(names), 8, replace=False)]
        video = cache / "videos" / f"v{v}.mp4"
        if not video.exists():  # written once; the same photos every run (seeded)
            tmp = video.with_suffix(".tmp.mp4")
            write_video(tmp, photos, scene_s=4.0, size=(320, 240))
            tmp.replace(video)
        _, _, batches = open_sampled(video, 4.0, 10_000, batch=16)
        start = sum(len(x) for x in visual)
        for frames, _ in batches:
            vis, sem = embedder.embed_frames(frames)
            visual.append(vis)
            semantic.append(sem)
        n = sum(len(x) for x in visual) - start
        next_row.append(np.minimum(np.arange(start + 1, start + n + 1), start + n - 1))
        print(f"  features: video {v + 1}/{n_videos}, {start + n} frames", flush=True)
    out = {
        "visual": np.concatenate(visual),
        "semantic": np.concatenate(semantic),
        "next_row": np.concatenate(next_row),
    }
    np.savez(path, **out)
    return out["visual"], out["semantic"], out["next_row"]


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


class Mixes:
    """Frame g: a random mix of a real frame and the next frame of its video, plus noise
    (``NOISE``). 1,536 real frames stretched to ten million are ~6,500 near copies each: past
    a million, the exact top 10 of a query is set by the noise among them."""

    def __init__(self, base: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        self.base = base

    def features(self, chunk: int) -> np.ndarray:
        """The (FRAMES_PER_VIDEO, 1664) features of synthetic video ``chunk`` (deterministic)."""
        visual, semantic, next_row = self.base
        rng = np.random.default_rng(1_000_003 * chunk + 11)
        i = rng.integers(0, len(visual), FRAMES_PER_VIDEO)
        j = next_row[i]
        a = rng.random((FRAMES_PER_VIDEO, 1), dtype=np.float32)
        out = np.empty((FRAMES_PER_VIDEO, VISUAL_DIM + SEMANTIC_DIM), np.float32)
        for lo, hi, x in _spaces(visual, semantic):
            d = hi - lo
            noise = rng.standard_normal((FRAMES_PER_VIDEO, d), dtype=np.float32)
            out[:, lo:hi] = _unit(a * x[i] + (1 - a) * x[j] + noise * (NOISE / np.sqrt(d)))
        return out


class Scenes:
    """Frames in scenes of ``SCENE_FRAMES`` (10 s at 1 frame/s), every scene distinct: its
    centre drawn from a Gaussian with the real frames' mean and covariance, its frames the
    centre plus a deviation with the covariance of real frames one second apart (twice
    that of the real neighbours 0.25 s apart, as a random walk's), re-normalised, per
    space. Ten million frames are a million scenes, as 10,000 hours of footage would be."""

    def __init__(self, base: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        visual, semantic, next_row = base
        moved = next_row != np.arange(len(next_row))
        self.fits = []
        for lo, hi, x in _spaces(visual, semantic):
            x = x.astype(np.float32)
            mean = x.mean(axis=0)
            spread = _basis((x - mean) / np.sqrt(len(x) - 1))
            diff = x[next_row[moved]] - x[moved]
            drift = _basis(diff * np.sqrt(4 / 2 / len(diff)))  # 1 s = 4 steps; half: from centre
            self.fits.append((lo, hi, mean, spread, drift))

    def features(self, chunk: int) -> np.ndarray:
        rng = np.random.default_rng(2_000_003 * chunk + 17)
        scenes = FRAMES_PER_VIDEO // SCENE_FRAMES
        out = np.empty((FRAMES_PER_VIDEO, VISUAL_DIM + SEMANTIC_DIM), np.float32)
        for lo, hi, mean, spread, drift in self.fits:
            z = rng.standard_normal((scenes, len(spread)), dtype=np.float32)
            centres = np.repeat(mean + z @ spread, SCENE_FRAMES, axis=0)
            w = rng.standard_normal((FRAMES_PER_VIDEO, len(drift)), dtype=np.float32)
            out[:, lo:hi] = _unit(centres + w @ drift)
        return out


def _basis(rows: np.ndarray, share: float = 0.99) -> np.ndarray:
    """B with z @ B (z standard normal) distributed as z' @ ``rows`` (covariance rows.T @
    rows), keeping the principal directions that hold ``share`` of its variance (a fifth
    to a half of the rows), so ten million frames are drawn in minutes."""
    _, sv, vt = np.linalg.svd(rows, full_matrices=False)
    keep = int(np.searchsorted(np.cumsum(sv**2) / np.sum(sv**2), share)) + 1
    return (sv[:keep, None] * vt[:keep]).astype(np.float32)


def _spaces(visual: np.ndarray, semantic: np.ndarray):
    return ((0, VISUAL_DIM, visual), (VISUAL_DIM, VISUAL_DIM + SEMANTIC_DIM, semantic))


WORKLOADS = {"mixes": Mixes, "scenes": Scenes}


def batch_of(chunk: int, workload) -> FusedBatch:
    video = chunk + 1
    frames = np.arange(FRAMES_PER_VIDEO)
    ids = np.array([vector_id(video, int(f)) for f in frames], np.int64)
    times = np.stack([frames, frames + 1], axis=1).astype(np.float32)
    return FusedBatch(ids=ids, times=times, features=workload.features(chunk))


def ground_truth(
    queries: dict[str, np.ndarray], n_chunks: int, workload
) -> dict[str, list[list[tuple[int, int]]]]:
    """Exact top-K (video, frame) per query and space, by brute force over every frame."""
    best = {
        s: (np.full((len(q), K), -np.inf, np.float32), np.zeros((len(q), K), np.int64))
        for s, q in queries.items()
    }
    for c in range(n_chunks):
        feats = workload.features(c)
        for space, q in queries.items():
            x = feats[:, :VISUAL_DIM] if space == "visual" else feats[:, VISUAL_DIM:]
            scores = q @ x.T
            gid = np.arange(c * FRAMES_PER_VIDEO, (c + 1) * FRAMES_PER_VIDEO)
            s0, g0 = best[space]
            s1 = np.concatenate([s0, scores], axis=1)
            g1 = np.concatenate([g0, np.broadcast_to(gid, scores.shape)], axis=1)
            top = np.argpartition(-s1, K - 1, axis=1)[:, :K]
            best[space] = (np.take_along_axis(s1, top, 1), np.take_along_axis(g1, top, 1))
    return {
        s: [
            [(int(g) // FRAMES_PER_VIDEO + 1, int(g) % FRAMES_PER_VIDEO) for g in row]
            for row in gids
        ]
        for s, (_, gids) in best.items()
    }


# -- the index ------------------------------------------------------------------------------


def build(
    shards, n_chunks: int, workload, window: int = 8, acks: list | None = None, settle: int = 0
) -> float:
    """Send every batch (``window`` in flight); ``acks`` gets each one's wall time. With
    ``settle``, every that many videos the build waits for the shards' background work (a
    space's first compression), so its uncompressed index does not grow meanwhile."""
    import ray

    t0 = time.perf_counter()
    in_flight: list = []
    for c in range(n_chunks):
        if settle and c and c % settle == 0:
            ray.get(in_flight)
            in_flight = []
            ray.get([h.wait_idle.remote() for group in shards.replicas for h in group])
        if len(in_flight) >= window:
            ray.get(in_flight.pop(0))
            if acks is not None:
                acks.append(time.time())
        in_flight.append(shards.handle_for(c + 1).add.remote(batch_of(c, workload)))
        if (c + 1) % 100 == 0:
            print(
                f"  built {c + 1}/{n_chunks} videos ({time.perf_counter() - t0:.0f} s)", flush=True
            )
    ray.get(in_flight)
    ray.get([h.wait_idle.remote() for group in shards.replicas for h in group])
    return time.perf_counter() - t0


def recall(shards, queries: dict[str, np.ndarray], truth) -> dict[str, float]:
    out = {}
    for space, q in queries.items():
        got: list = []
        for i in range(0, len(q), 8):  # 8,000 rows re-ranked a call: within the shard timeout
            found = shards.search(space, q[i : i + 8], K)
            if found.missing:
                raise SystemExit(f"recall: a {space} search timed out (partial answer)")
            got += list(found)
        out[space] = float(
            np.mean(
                [
                    len({(h.video_id, int(h.t_start)) for h in hits} & set(want)) / K
                    for hits, want in zip(got, truth[space])
                ]
            )
        )
    return out


def training(stats: list[dict], acks: list[float]) -> dict:
    """Per space, the longest rebuild a shard ran (the last one of each shard: the switch
    to the compressed index, or its re-training) and frames/s acknowledged while any ran."""
    spans = [tuple(t) for st in stats for t in st["trained"].values()]
    out = {
        f"{space}_s": round(
            max(
                (
                    b - a
                    for a, b in (st["trained"][space] for st in stats if space in st["trained"])
                ),
                default=0,
            ),
            1,
        )
        for space in ("visual", "semantic")
    }
    during = [t for t in acks if any(a <= t <= b for a, b in spans)]
    busy = sum(b - a for a, b in _union(spans))
    out["ingest_frames_per_s_during"] = (
        round(len(during) * FRAMES_PER_VIDEO / busy) if busy else None
    )
    return out


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def restart(data: Path, num_shards: int, exact_max: int, compress_min: int, probe) -> float:
    """Seconds from starting the shard actors on a data dir to every shard answering."""
    t0 = time.perf_counter()
    shards = open_shards(data, num_shards, exact_max, compress_min)
    shards.search("semantic", probe, K)
    took = time.perf_counter() - t0
    shards.close()
    return took


def load(shards, queries: np.ndarray, clients: int, seconds: float) -> dict:
    """C threads, each one query at a time, for ``seconds``; latencies in ms, and how many
    answers were partial (a shard left out after ``search_shard_timeout_s``)."""
    lat: list[list[float]] = [[] for _ in range(clients)]
    partial = [0] * clients
    stop = threading.Event()
    errors: list[BaseException] = []
    for i in range(clients * 2):  # warm-up
        shards.search("semantic", queries[[i % len(queries)]], K)

    def client(c: int) -> None:
        i = c * 7
        try:
            while not stop.is_set():
                q = queries[[i % len(queries)]]
                t = time.perf_counter()
                found = shards.search("semantic", q, K)
                lat[c].append((time.perf_counter() - t) * 1000)
                partial[c] += bool(found.missing)
                i += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    all_lat = np.concatenate([np.array(x) for x in lat])
    return {
        "queries": len(all_lat),
        "qps": round(len(all_lat) / wall, 1),
        "p50_ms": round(float(np.percentile(all_lat, 50)), 2),
        "p99_ms": round(float(np.percentile(all_lat, 99)), 2),
        "max_ms": round(float(all_lat.max()), 2),
        "partial": sum(partial),
    }


def open_shards(data: Path, num_shards: int, exact_max: int, compress_min: int = 0, **index: int):
    """A ShardSet on ``data``; ``index``: other ``index_*`` settings (nprobe, refine)."""
    from vifusion.config import Config
    from vifusion.index import ShardSet

    cfg = Config(
        data_dir=data,
        num_shards=num_shards,
        faiss_threads=max(1, 2 // num_shards),
        index_exact_max=exact_max,
        index_compress_min=compress_min,
        snapshot_log_bytes=1 << 30,
        **{f"index_{k}": v for k, v in index.items()},
    )
    return ShardSet(cfg)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="100k frames, short loads: under a minute once features are cached",
    )
    ap.add_argument("--n", type=int, help="frames to index (default 1,000,000; quick 100,000)")
    ap.add_argument(
        "--compress-min",
        type=int,
        help="index_compress_min (default 100,000; quick 20,000; 0: never)",
    )
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument(
        "--settle",
        type=int,
        default=0,
        help="wait for the shards' trainings every this many frames (0: never)",
    )
    ap.add_argument(
        "--workload",
        choices=sorted(WORKLOADS),
        default="mixes",
        help="mixes: real frames mixed with their neighbours (near copies past a million); "
        "scenes: distinct 10-frame scenes fitted to the real frames' spread",
    )
    ap.add_argument(
        "--recall-only",
        action="store_true",
        help="stop after build, size and recall (no loads, restart or shard scaling)",
    )
    ap.add_argument(
        "--keep",
        type=Path,
        help="build the shards in this (new) folder and leave them there, to search again",
    )
    ap.add_argument(
        "--reuse",
        type=Path,
        help="search the shards a --keep run left in this folder (run with the same --n, "
        "--shards and --workload) instead of building them",
    )
    ap.add_argument(
        "--sweep",
        default="",
        help="after recall, the shards opened again at each NPROBExREFINE (e.g. "
        "32x300,128x100): recall and one client's load at each",
    )
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, help="per load level (default 20; quick 5)")
    ap.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "vifusion-bench" / "search"
    )
    args = ap.parse_args()
    if args.keep and args.reuse:
        ap.error("--keep builds a new folder, --reuse searches an old one: name one")
    n = args.n or (100_000 if args.quick else 1_000_000)
    seconds = args.seconds or (5.0 if args.quick else 20.0)
    exact_max = 10_000 if args.quick else 50_000
    compress_min = (
        args.compress_min if args.compress_min is not None else (20_000 if args.quick else 100_000)
    )
    scale_n = 30_000 if args.quick else 100_000
    n_chunks = n // FRAMES_PER_VIDEO
    args.cache.mkdir(parents=True, exist_ok=True)

    import ray

    t0 = time.perf_counter()
    base = real_features(args.cache, 6 if args.quick else 12)
    print(f"real features: {len(base[0])} frames ({time.perf_counter() - t0:.0f} s)", flush=True)
    workload = WORKLOADS[args.workload](base)
    rng = np.random.default_rng(3)
    from vifusion.extract.model import Embedder, imagenet_class_names

    names = imagenet_class_names()
    texts = [f"a photo of a {names[i]}" for i in rng.choice(len(names), 200, replace=False)]
    text_q = Embedder(cache_dir=args.cache / "models").embed_text(texts).astype(np.float32)
    rows = rng.choice(len(base[0]), 200, replace=False)
    img_q = _unit(
        base[0][rows]
        + rng.standard_normal((200, VISUAL_DIM), dtype=np.float32) * (NOISE / np.sqrt(VISUAL_DIM))
    )
    queries = {"semantic": text_q, "visual": img_q}

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    if args.keep:
        args.keep.mkdir(parents=True)
    work = args.keep or args.reuse or Path(tempfile.mkdtemp(prefix="vifusion-search-bench-"))
    # shards of the scaling step are built afresh, never added to a reused folder's
    scratch = Path(tempfile.mkdtemp(prefix="vifusion-search-bench-")) if args.reuse else work
    report: dict = {
        "benchmark": "search",
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "frames": n,
        "workload": args.workload,
        "shards": args.shards,
        "clients": args.clients,
        "seconds": seconds,
    }
    try:
        shards = open_shards(work / "main", args.shards, exact_max, compress_min)
        if args.reuse:
            print(f"searching the {n:,} frames built in {args.reuse} ...", flush=True)
            # a space whose codes are not this run's settings re-trains first
            ray.get([h.wait_idle.remote() for group in shards.replicas for h in group])
            stats = shards.stats()
            report["build_s"] = "reused"
            report["training"] = training(stats, []) if stats[0]["trained"] else "reused"
        else:
            print(f"building {n:,} frames over {args.shards} shards ...", flush=True)
            acks: list[float] = []
            settle = args.settle // FRAMES_PER_VIDEO
            build_s = build(shards, n_chunks, workload, acks=acks, settle=settle)
            report["build_s"] = round(build_s, 1)
            report["ingest_frames_per_s"] = round(n / build_s)
            shards.snapshot()
            stats = shards.stats()
            report["training"] = training(stats, acks)
        held = sum(st["vectors"]["visual"] for st in stats)
        if held != n:
            raise SystemExit(f"the shards hold {held:,} frames, not {n:,}")
        snap = sum(p.stat().st_size for p in (work / "main" / "index").rglob("snapshot.npz"))
        vec_files = sum(p.stat().st_size for p in (work / "main" / "index").rglob("*.f16"))
        report["index"] = stats[0]["index"]
        # resident shard memory: both spaces' indexes (codes, ids, centroids, codebooks,
        # id -> row maps) and the id -> time table
        index = sum(st["index_bytes"]["visual"] + st["index_bytes"]["semantic"] for st in stats)
        times = sum(st["times_bytes"] for st in stats)
        report["bytes_per_frame"] = round((index + times) / n)
        report["index_bytes_per_frame"] = round(index / n)
        report["times_bytes_per_frame"] = round(times / n)
        report["snapshot_bytes_per_frame"] = round(snap / n)
        report["vector_file_bytes_per_frame"] = round(vec_files / n)
        report["bytes_per_frame_fp32"] = 8 + 8 + 4 * (VISUAL_DIM + SEMANTIC_DIM)
        print("exact ground truth ...", flush=True)
        truth = ground_truth(queries, n_chunks, workload)
        report["recall_at_10"] = {s: round(r, 4) for s, r in recall(shards, queries, truth).items()}
        print(f"  recall@10: {report['recall_at_10']}", flush=True)
        if args.sweep:
            report["sweep"] = {}
            for setting in args.sweep.split(","):
                nprobe, refine = (int(x) for x in setting.split("x"))
                shards.close()
                shards = open_shards(
                    work / "main",
                    args.shards,
                    exact_max,
                    compress_min,
                    nprobe=nprobe,
                    refine=refine,
                )
                got = {s: round(r, 4) for s, r in recall(shards, queries, truth).items()}
                shards.query_batching = True
                got["one_client"] = load(shards, text_q, 1, seconds / 2)
                report["sweep"][setting] = got
                print(f"  nprobe {nprobe}, refine {refine}: {got}", flush=True)
            shards.close()
            shards = open_shards(work / "main", args.shards, exact_max, compress_min)
        if args.recall_only:
            print(json.dumps(report))
            return

        shards.query_batching = True
        report["one_client"] = load(shards, text_q, 1, seconds)
        print(f"  one client: {report['one_client']}", flush=True)
        shards.query_batching = False
        report["one_call_per_query"] = load(shards, text_q, args.clients, seconds)
        print(f"  (a) one call per query: {report['one_call_per_query']}", flush=True)
        shards.query_batching = True
        report["fused"] = load(shards, text_q, args.clients, seconds)
        print(f"  (b) query fusion:       {report['fused']}", flush=True)
        shards.close()
        report["restart_to_ready_s"] = round(
            restart(work / "main", args.shards, exact_max, compress_min, text_q[:1]), 1
        )
        print(f"  restart to ready: {report['restart_to_ready_s']} s", flush=True)

        scaling = {}
        for s in (1, 2, 4):
            sh = open_shards(scratch / f"scale-{s}", s, scale_n // 8)  # IVF at every shard count
            build(sh, scale_n // FRAMES_PER_VIDEO, workload)
            scaling[s] = load(sh, text_q, args.clients, seconds / 2)
            sh.close()
            print(f"  {s} shard(s), {scale_n:,} frames, fused: {scaling[s]}", flush=True)
        report["scaling"] = {
            "frames": scale_n,
            **{f"{s}_shards_qps": v["qps"] for s, v in scaling.items()},
        }
    finally:
        ray.shutdown()
        if not (args.keep or args.reuse):
            shutil.rmtree(work, ignore_errors=True)
        if args.reuse:
            shutil.rmtree(scratch, ignore_errors=True)

    a, b = report["one_call_per_query"], report["fused"]
    report["qps_ratio"] = round(b["qps"] / a["qps"], 2)
    report["p50_ratio"] = round(b["p50_ms"] / a["p50_ms"], 3)
    print()
    print(f"ViFusion search benchmark  {report['date']}  {report['machine']}")
    print(f"{n:,} frames x 2 spaces over {args.shards} shards; index {report['index']}")
    print(
        f"build {report['build_s']} s; {report['bytes_per_frame']} resident index bytes/frame "
        f"(snapshot {report['snapshot_bytes_per_frame']}, vector files "
        f"{report['vector_file_bytes_per_frame']}, raw fp32 {report['bytes_per_frame_fp32']})"
    )
    print(f"training {report['training']}; restart to ready {report['restart_to_ready_s']} s")
    print(f"one client (query batching on): {report['one_client']}")
    print(f"recall@10 vs exact brute force: {report['recall_at_10']}")
    print(f"{'mode':<28}{'QPS':>9}{'p50 ms':>9}{'p99 ms':>9}")
    for name, r in (("(a) one call per query", a), ("(b) query fusion", b)):
        print(f"{name:<28}{r['qps']:>9}{r['p50_ms']:>9}{r['p99_ms']:>9}")
    print(
        f"fusion / baseline: QPS x{report['qps_ratio']}, p50 x{report['p50_ratio']}  (aim: QPS >= 4x at p50 <= 1x)"
    )
    print(
        f"fused QPS by shard count ({scale_n:,} frames): "
        + ", ".join(f"{s}: {v}" for s, v in report["scaling"].items() if s != "frames")
    )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
