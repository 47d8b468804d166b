"""Frame extraction throughput on CPU: ViFusion vs. the Ray Data pipeline a user would write.

Three figures, in frames per second of *sampled* frames (the default policy, 1 frame/s, the
frame at the middle of each second; ``vifusion.extract.decode.sample_frames``):

1. **ViFusion**: the real indexing path. ``Runtime(cfg, writer=True).indexer.index_files``
   over the workload: the extractor actor decodes (decord, only the sampled frames, resized
   inside decord), embeds (EfficientNet-Lite0 + ConSE), fuses and sends to the FAISS shard
   actors, and every video is committed. Actor start and model load are excluded by
   indexing a 2-second video first.
2. **Baseline**: ``ray.data.read_videos`` (decodes every frame with decord) -> ``filter``
   keeping the same frame indices as ViFusion -> ``map`` resizing to a short side of 224
   with PIL -> ``map_batches`` with a callable class holding ViFusion's ``Embedder``, batch
   16, one actor with the same torch thread count.
3. **Model-only bound**: ``Embedder.embed_frames`` alone on frames already decoded into
   memory (uint8, short side 224), batch 16, same threads.

It prints the workload, a table (method, frames, seconds, frames/s), the ratios
ViFusion / baseline and ViFusion / model-only, and last one line of JSON with every figure.

The videos are written once with ``vifusion.samples.write_video`` into
/tmp/vifusion-bench/extract/ (``--cache``) and reused by later runs.

Run (from the repository root):

    .venv/bin/python benchmarks/extract.py           # 6 videos x 60 s, 640x360, 30 fps
    .venv/bin/python benchmarks/extract.py --quick   # 2 videos x 20 s: under a minute
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vifusion.config import Config
from vifusion.extract.decode import decode, output_size, probe, sample_frames
from vifusion.samples import MOTION, PHOTOS, write_video

SIZE = (640, 360)  # (width, height) of the workload videos
FPS = 30
SCENE_S = 10.0
BATCH = 16  # frames per model forward pass, every method
SHORT_SIDE = 224
MODEL_ONLY_MAX_FRAMES = 320
SCENES = [*PHOTOS, MOTION]


@dataclass(frozen=True)
class Workload:
    videos: list[Path]
    seconds: float  # per video
    warmup: Path  # a 2-second video indexed before timing
    keep: dict[str, list[int]]  # resolved path -> sampled frame indices (ViFusion's policy)

    @property
    def frames(self) -> int:
        return sum(len(v) for v in self.keep.values())


@dataclass(frozen=True)
class Result:
    method: str
    frames: int
    seconds: float

    @property
    def fps(self) -> float:
        return self.frames / self.seconds


# --------------------------------------------------------------------------- workload


def _ensure_video(path: Path, photos: list[str], scene_s: float) -> Path:
    """Write the video unless a previous run did (written aside, then renamed: no half files)."""
    if not path.exists():
        part = path.with_name(path.stem + ".part.mp4")
        write_video(part, photos, scene_s=scene_s, fps=FPS, size=SIZE)
        part.replace(path)
    return path


def make_workload(cache: Path, num_videos: int, seconds: float, cfg: Config) -> Workload:
    """Distinct videos (different scene orders, so none is skipped as already indexed)."""
    folder = cache / f"{SIZE[0]}x{SIZE[1]}-{FPS}fps"
    scenes_per_video = max(1, round(seconds / SCENE_S))
    scene_s = seconds / scenes_per_video
    videos = []
    for v in range(num_videos):
        photos = [SCENES[(v * scenes_per_video + j) % len(SCENES)] for j in range(scenes_per_video)]
        videos.append(_ensure_video(folder / f"video{v}-{seconds:g}s.mp4", photos, scene_s))
    warmup = _ensure_video(folder / "warmup-2s.mp4", ["coffee"], 2.0)
    keep = {
        str(p.resolve()): [i for i, _, _ in sample_frames(probe(p), cfg.sample_fps, cfg.max_frames)]
        for p in videos
    }
    return Workload(videos, seconds, warmup, keep)


# --------------------------------------------------------------------------- 1. ViFusion


def bench_vifusion(cfg: Config, wl: Workload) -> Result:
    """index_files over the workload into a fresh data dir, after a warm-up video."""
    from vifusion.runtime import Runtime

    data_dir = Path(tempfile.mkdtemp(prefix="vifusion-bench-"))
    try:
        with Runtime(cfg.model_copy(update={"data_dir": data_dir}), writer=True) as rt:
            _check_ready(rt.indexer.index_files([wl.warmup]))  # actor start + model load
            t0 = time.perf_counter()
            results = rt.indexer.index_files(wl.videos)
            seconds = time.perf_counter() - t0
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    _check_ready(results)
    frames = sum(r.frames for r in results)
    if frames != wl.frames:
        raise SystemExit(f"ViFusion indexed {frames} frames, the sampling policy gives {wl.frames}")
    return Result("vifusion", frames, seconds)


def _check_ready(results: list[Any]) -> None:
    bad = [r for r in results if r.status != "ready"]
    if bad:
        raise SystemExit(f"not indexed: {[(r.path, r.status, r.error) for r in bad]}")


# --------------------------------------------------------------------------- 2. baseline


class EmbedFrames:
    """The map_batches UDF: one Embedder per actor, loaded in the constructor."""

    def __init__(self, threads: int, conse_top_k: int, cache_dir: Path) -> None:
        import torch

        from vifusion.extract.model import Embedder

        torch.set_num_threads(threads)  # Ray sets OMP_NUM_THREADS=1 in a num_cpus=1 actor
        with contextlib.redirect_stdout(io.StringIO()):  # the weights loader prints
            self.embedder = Embedder(conse_top_k, torch.device("cpu"), cache_dir)
        self.ready_at = time.time()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        visual, semantic = self.embedder.embed_frames(batch["frame"])
        return {
            "path": batch["path"],
            "frame_index": batch["frame_index"],
            "visual": visual,
            "semantic": semantic,
            "ready_at": np.full(len(visual), self.ready_at),
        }


def _keep_filter(keep: dict[str, list[int]]):  # -> row predicate
    wanted = {path: frozenset(indices) for path, indices in keep.items()}

    def keep_row(row: dict[str, Any]) -> bool:
        return row["frame_index"] in wanted[str(Path(row["path"]).resolve())]

    return keep_row


def _resize_row(row: dict[str, Any]) -> dict[str, Any]:
    from PIL import Image

    frame = row["frame"]
    w, h = output_size(frame.shape[1], frame.shape[0], SHORT_SIDE)
    row["frame"] = np.asarray(Image.fromarray(frame).resize((w, h), Image.BILINEAR))
    return row


def warm_up_readers(path: Path) -> None:
    """Read a short video once, so the read task workers have imported ray.data and decord
    (ViFusion's extractor did the same during its warm-up video)."""
    import ray

    ray.data.read_videos([str(path)], include_paths=True).filter(lambda r: r["frame_index"] == 0).materialize()


def bench_baseline(cfg: Config, wl: Workload, threads: int, cache_dir: Path) -> Result:
    """read_videos -> filter -> resize -> map_batches(Embedder), one actor, batch 16.

    Model load is excluded: ``wait_for_min_actors_s`` makes Ray Data start the actor (and
    load the model) before it launches any read task, and the time counted runs from the
    moment the model is loaded (stamped by the actor) to the end of ``materialize()``. No
    decoding can overlap the load, so neither side gets it for free.
    """
    import ray
    from ray.data import DataContext

    DataContext.get_current().wait_for_min_actors_s = 600
    ds = (
        ray.data.read_videos([str(p) for p in wl.videos], include_paths=True)
        .filter(_keep_filter(wl.keep))
        .map(_resize_row)
        .map_batches(
            EmbedFrames,
            fn_constructor_kwargs={"threads": threads, "conse_top_k": cfg.conse_top_k, "cache_dir": cache_dir},
            batch_size=BATCH,
            batch_format="numpy",
            concurrency=1,
            num_cpus=1,
        )
    )
    out = ds.materialize()
    end = time.time()
    rows = out.count()
    if rows != wl.frames:
        raise SystemExit(f"baseline embedded {rows} frames, ViFusion {wl.frames}")
    return Result("baseline (ray.data)", rows, end - out.max("ready_at"))


# --------------------------------------------------------------------------- 3. model only


def decoded_frames(wl: Workload, cfg: Config, limit: int) -> Iterator[np.ndarray]:
    """Batches of the workload's sampled frames, decoded and resized as ViFusion does."""
    left = limit
    for path in wl.videos:
        for frames, _ in decode(path, cfg.sample_fps, cfg.max_frames, SHORT_SIDE, BATCH):
            if left <= 0:
                return
            yield frames[:left]
            left -= len(frames[:left])


def bench_model_only(cfg: Config, wl: Workload, threads: int, cache_dir: Path) -> Result:
    """Embedder.embed_frames in this process on frames already in memory."""
    import torch

    from vifusion.extract.model import Embedder

    torch.set_num_threads(threads)
    batches = list(decoded_frames(wl, cfg, min(wl.frames, MODEL_ONLY_MAX_FRAMES)))
    with contextlib.redirect_stdout(io.StringIO()):
        embedder = Embedder(cfg.conse_top_k, torch.device("cpu"), cache_dir)
    embedder.embed_frames(batches[0])  # warm-up: first-call allocations
    t0 = time.perf_counter()
    for frames in batches:
        embedder.embed_frames(frames)
    seconds = time.perf_counter() - t0
    return Result("model only", sum(len(b) for b in batches), seconds)


# --------------------------------------------------------------------------- report


def machine() -> str:
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}, {os.cpu_count()} cpus, {platform.system()}"


def print_table(results: list[Result]) -> None:
    print(f"{'method':<22}{'frames':>8}{'seconds':>10}{'frames/s':>10}")
    for r in results:
        print(f"{r.method:<22}{r.frames:>8}{r.seconds:>10.2f}{r.fps:>10.1f}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2 videos x 20 s (under a minute)")
    p.add_argument("--threads", type=int, default=0, help="torch threads everywhere; 0: Config.threads")
    p.add_argument("--cache", type=Path, default=Path("/tmp/vifusion-bench/extract"), help="video cache")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    import ray

    base = Config(torch_threads=args.threads, embed_batch=BATCH)
    threads = base.torch_threads or base.threads
    cfg = base.model_copy(update={"torch_threads": threads})
    num_videos, seconds = (2, 20.0) if args.quick else (6, 60.0)
    models = args.cache / "models"  # class-name text vectors, cached across runs

    wl = make_workload(args.cache, num_videos, seconds, cfg)
    print(f"workload: {len(wl.videos)} videos x {seconds:g} s, {SIZE[0]}x{SIZE[1]}, {FPS} fps, "
          f"{len(wl.videos) * seconds * FPS:.0f} frames decoded, {wl.frames} sampled "
          f"({cfg.sample_fps:g}/s); batch {BATCH}, {threads} torch threads", flush=True)

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    try:
        vifusion = bench_vifusion(cfg, wl)  # closes its actors: the baseline needs both CPUs
        warm_up_readers(wl.warmup)
        baseline = bench_baseline(cfg, wl, threads, models)
    finally:
        ray.shutdown()
    model_only = bench_model_only(cfg, wl, threads, models)

    print_table([vifusion, baseline, model_only])
    speedup = vifusion.fps / baseline.fps
    fraction = vifusion.fps / model_only.fps
    print(f"ViFusion / baseline:   {speedup:.2f}x  (aim >= 1.5x)")
    print(f"ViFusion / model-only: {fraction:.0%}  (aim >= 80%)")
    print(json.dumps({
        "benchmark": "extract",
        "quick": args.quick,
        "frames": wl.frames,
        "vifusion_fps": round(vifusion.fps, 2),
        "baseline_fps": round(baseline.fps, 2),
        "model_only_fps": round(model_only.fps, 2),
        "speedup_vs_baseline": round(speedup, 3),
        "fraction_of_model_bound": round(fraction, 3),
        "vifusion_s": round(vifusion.seconds, 3),
        "baseline_s": round(baseline.seconds, 3),
        "model_only_s": round(model_only.seconds, 3),
        "model_only_frames": model_only.frames,
        "threads": threads,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
    }))


if __name__ == "__main__":
    main()
