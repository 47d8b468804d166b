"""The extractor's embedding on a GPU against the same code on the machine's CPU cores.

Proves the GPU path (``pick_device`` -> CUDA) gives the vectors the CPU path gives, and
measures both on the same frames in one run:

1. **Agreement**: the same decoded frames embedded on the CPU and on CUDA; the smallest
   cosine between the two devices' visual and semantic vectors, and how often the top-1
   ImageNet class is the same.
2. **Model only**: ``Embedder.embed_frames`` on frames already in memory (uint8, short side
   224), at several batch sizes, CPU (all cores as torch threads) and CUDA.
3. **Extractor loop**: what ``ExtractorActor.index_video`` runs per video without Ray or the
   shards: ``open_sampled`` (probe, then decode only the kept frames) behind ``prefetch`` (decode
   in a thread while the model runs) -> ``embed_frames``, over the generated videos.
4. **Extractors on one node** (``--workers``): that loop in N processes at once, as N extractor
   actors on one node run it, each on its own videos with one torch thread; on the CPU and on
   one shared GPU. Total sampled frames over the wall time from a common start.

Device ``nvdec`` is ``cuda`` with the video decoded on the GPU's video engine
(``open_sampled(gpu=True)``, as the extractor does where its model is on CUDA); ``cuda`` then
decodes on the CPU. ``decode only`` times decoding alone, on the CPU and on NVDEC.

It prints a table (what, device, frames, seconds, frames/s), the ratios CUDA / CPU, and last
one line of JSON. Without CUDA it measures the CPU alone and says so.

It needs no Ray, so it runs on a GPU machine with only PyAV, pydantic and the EfficientNet and
ImageNet-class wheels installed beside PyTorch; ``--cache`` then names a models dir holding the
class-name vectors, so the text model is not needed (docs/benchmarks.md, "The GPU path of the
extractor").

    python3 benchmarks/extract_gpu.py                 # 4 videos x 30 s, 640x360, 30 fps
    python3 benchmarks/extract_gpu.py --quick         # 1 video x 10 s
    python3 benchmarks/extract_gpu.py --size 1280x720 --workers 1,15
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _common import machine  # benchmarks/ is on sys.path when a script here runs

from vifusion.config import Config
from vifusion.extract import _nvdec
from vifusion.extract._prefetch import prefetch
from vifusion.extract.decode import open_sampled
from vifusion.extract.model import Embedder
from vifusion.extract.vision import features_and_probs, preprocess
from vifusion.samples import MOTION, PHOTOS, write_video

FPS = 30
EMBED_SIDE = 224  # the extractor's (ExtractorActor's EMBED_SIDE)
BATCHES = (16, 64, 256)
SCENES = [*PHOTOS, MOTION]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def make_videos(folder: Path, count: int, seconds: float, size: tuple[int, int]) -> list[Path]:
    scene_s = 5.0
    per_video = max(1, round(seconds / scene_s))
    videos = []
    for v in range(count):
        photos = [SCENES[(v * per_video + j) % len(SCENES)] for j in range(per_video)]
        path = folder / f"video{v}.mp4"
        write_video(path, photos, scene_s=seconds / per_video, fps=FPS, size=size)
        videos.append(path)
    return videos


def decoded(videos: list[Path], cfg: Config) -> np.ndarray:
    """Every sampled frame of ``videos``, decoded as the extractor decodes them."""
    frames = []
    for path in videos:
        _, _, batches = open_sampled(path, cfg.sample_fps, cfg.max_frames, EMBED_SIDE, 64)
        frames += [f for f, _ in batches]
    return np.concatenate(frames)


def model_only(embedder: Embedder, frames: np.ndarray, batch: int, min_frames: int) -> dict:
    """frames/s of embed_frames alone, cycling ``frames`` to at least ``min_frames``."""
    reps = max(1, -(-min_frames // len(frames)))
    work = np.concatenate([frames] * reps)
    embedder.embed_frames(work[:batch])  # warm-up: kernels chosen, caches filled
    _sync(embedder.device)
    t0 = time.perf_counter()
    for i in range(0, len(work), batch):
        embedder.embed_frames(work[i : i + batch])  # returns numpy: the copy back is counted
    seconds = time.perf_counter() - t0
    return {"frames": len(work), "seconds": round(seconds, 4), "fps": round(len(work) / seconds, 1)}


def decode_only(videos: list[Path], cfg: Config, gpu: bool) -> dict:
    """frames/s of the extractor's decoding alone (``gpu``: on NVDEC), every video in turn."""
    frames = 0
    t0 = time.perf_counter()
    for path in videos:
        _, _, batches = open_sampled(
            path, cfg.sample_fps, cfg.max_frames, EMBED_SIDE, cfg.embed_batch, gpu=gpu
        )
        frames += sum(len(batch) for batch, _ in batches)
    seconds = time.perf_counter() - t0
    return {"frames": frames, "seconds": round(seconds, 4), "fps": round(frames / seconds, 1)}


def extractor_loop(
    embedder: Embedder, videos: list[Path], cfg: Config, gpu_decode: bool = False
) -> dict:
    """The extractor's per-video loop: decode (in a thread) -> embed, every video in turn."""
    frames = 0
    t0 = time.perf_counter()
    for path in videos:
        _, _, batches = open_sampled(
            path, cfg.sample_fps, cfg.max_frames, EMBED_SIDE, cfg.embed_batch, gpu=gpu_decode
        )
        for batch, _ in prefetch(batches):
            embedder.embed_frames(batch)
            frames += len(batch)
    seconds = time.perf_counter() - t0
    return {"frames": frames, "seconds": round(seconds, 4), "fps": round(frames / seconds, 1)}


def _worker(device: str, videos: list[str], cache: str, cfg: Config, start, out) -> None:
    """One extractor process: load, wait for the others, run the loop, report."""
    torch.set_num_threads(1)  # as an extractor actor on a node of many (Config.threads)
    nvdec = device == "nvdec"
    emb = Embedder(cfg.conse_top_k, torch.device("cuda" if nvdec else device), Path(cache))
    emb.embed_frames(np.zeros((cfg.embed_batch, EMBED_SIDE, EMBED_SIDE, 3), np.uint8))
    start.wait()
    out.put(extractor_loop(emb, [Path(v) for v in videos], cfg, nvdec)["frames"])


def node(device: str, workers: int, videos: list[Path], cache: Path, cfg: Config) -> dict:
    """``workers`` extractor processes on this node, each on ``len(videos)`` videos; device
    ``nvdec``: the model on CUDA, the video decoded on NVDEC."""
    ctx = mp.get_context("spawn")  # CUDA cannot be used in a forked child
    start, out = ctx.Barrier(workers + 1), ctx.Queue()
    procs = [
        ctx.Process(
            target=_worker, args=(device, [str(v) for v in videos], str(cache), cfg, start, out)
        )
        for _ in range(workers)
    ]
    for p in procs:
        p.start()
    start.wait()
    t0 = time.perf_counter()
    frames = sum(out.get() for _ in procs)
    seconds = time.perf_counter() - t0
    for p in procs:
        p.join()
    return {"frames": frames, "seconds": round(seconds, 4), "fps": round(frames / seconds, 1)}


def agreement(cpu: Embedder, gpu: Embedder, frames: np.ndarray) -> dict:
    """How far the CUDA vectors are from the CPU's on the same frames."""
    cv, cs = cpu.embed_frames(frames)
    gv, gs = gpu.embed_frames(frames)
    top_cpu, top_gpu = (
        features_and_probs(e.vision, preprocess(frames, e.device))[1].argmax(-1).cpu()
        for e in (cpu, gpu)
    )
    return {
        "frames": len(frames),
        "visual_min_cosine": round(float((cv * gv).sum(1).min()), 6),
        "semantic_min_cosine": round(float((cs * gs).sum(1).min()), 6),
        "top1_same": round(float((top_cpu == top_gpu).float().mean()), 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 video of 10 s")
    ap.add_argument("--videos", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=30.0, help="length of each video")
    ap.add_argument("--sample-fps", type=float, default=4.0, help="frames kept per second")
    ap.add_argument("--cache", type=Path, help="models dir holding the class-name vectors")
    ap.add_argument(
        "--workers", default="", help="extractor processes on one node, e.g. 1,4,15 (none: skip)"
    )
    ap.add_argument("--size", default="640x360", help="the videos' width x height")
    ap.add_argument(
        "--nodes-only",
        action="store_true",
        help="only the --workers rows, on the GPU (decoding on the CPU and on NVDEC)",
    )
    args = ap.parse_args()
    size = tuple(int(x) for x in args.size.split("x"))
    if args.quick:
        args.videos, args.seconds = 1, 10.0
    cfg = Config(sample_fps=args.sample_fps)
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    cuda = torch.cuda.is_available()
    cache = args.cache or Path(tempfile.mkdtemp(prefix="vifusion-gpu-models-"))

    with tempfile.TemporaryDirectory(prefix="vifusion-gpu-") as tmp:
        t0 = time.perf_counter()
        videos = make_videos(Path(tmp), args.videos, args.seconds, size)
        print(f"wrote {len(videos)} videos in {time.perf_counter() - t0:.1f} s", flush=True)
        frames = decoded(videos, cfg)
        min_frames = 1024 if args.quick else 4096
        devices = [torch.device("cpu")] + ([torch.device("cuda")] if cuda else [])
        embedders = {d.type: Embedder(cfg.conse_top_k, d, cache) for d in devices}
        nvdec = cuda and _nvdec.hwaccel(True) is not None
        print(f"NVDEC through PyAV: {'yes' if nvdec else 'no'}", flush=True)
        loops = list(embedders) + (["nvdec"] if nvdec else [])
        rows: list[tuple[str, str, dict]] = []
        whole = not args.nodes_only
        if whole:
            for d, emb in embedders.items():
                for b in BATCHES:
                    work = min_frames if d == "cuda" else min(min_frames, 4 * b)
                    rows.append((f"model only, batch {b}", d, model_only(emb, frames, b, work)))
        for d in ["cpu"] + (["nvdec"] if nvdec else []):
            rows.append(("decode only", d, decode_only(videos, cfg, d == "nvdec")))
        if whole:
            for d in loops:
                emb = embedders["cuda" if d == "nvdec" else d]
                rows.append(("extractor loop", d, extractor_loop(emb, videos, cfg, d == "nvdec")))
        elif cuda:
            loops.remove("cpu")
        for n in [int(w) for w in args.workers.split(",") if w]:
            for d in loops:
                rows.append((f"{n} extractors", d, node(d, n, videos[:2], cache, cfg)))
        sample = frames[:: max(1, len(frames) // 128)]
        agree = agreement(embedders["cpu"], embedders["cuda"], sample) if cuda and whole else None

    print(f"\n{'what':<24} {'device':<6} {'frames':>7} {'seconds':>9} {'frames/s':>10}")
    for what, d, r in rows:
        print(f"{what:<24} {d:<6} {r['frames']:>7} {r['seconds']:>9.3f} {r['fps']:>10.1f}")
    ratios = {}
    if cuda:
        by = {(w, d): r["fps"] for w, d, r in rows}
        ratios = {
            f"{d} / cpu, {w}": round(by[(w, d)] / by[(w, "cpu")], 2)
            for w, d, _ in rows
            if d != "cpu" and (w, "cpu") in by
        }
        for w, x in ratios.items():
            print(f"{w}: {x}x")
        print(f"agreement: {agree}")
    else:
        print("no CUDA device: the CPU alone was measured")
    print(
        json.dumps(
            {
                "benchmark": "extract_gpu",
                "date": datetime.date.today().isoformat(),
                "machine": machine(),
                "gpu": torch.cuda.get_device_name(0) if cuda else None,
                "torch": torch.__version__,
                "cpu_threads": threads,
                "videos": len(videos),
                "size": args.size,
                "seconds_each": args.seconds,
                "sample_fps": cfg.sample_fps,
                "embed_batch": cfg.embed_batch,
                "rows": [{"what": w, "device": d, **r} for w, d, r in rows],
                "over_cpu": ratios,
                "agreement": agree,
            }
        )
    )


if __name__ == "__main__":
    main()
