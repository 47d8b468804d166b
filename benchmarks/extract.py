"""Frame extraction throughput on CPU: ViFusion vs. the Ray Data pipeline a user would write.

Five figures, in frames per second of *sampled* frames (the default policy, 1 frame/s, the
frame at the middle of each second; ``vifusion.extract.decode.sample_frames``):

1. **ViFusion**: the real indexing path. ``Runtime(cfg, writer=True).indexer.index_files``
   over the workload: the extractor actor decodes (PyAV, only the packets the sampled frames
   need, each kept frame resized as it is converted), embeds (EfficientNet-Lite0 + ConSE),
   fuses and sends to the FAISS shard actors, and every frame is acknowledged (logged to
   disk). Actor start and model load are excluded by indexing a 2-second video first.
   With the default settings (screen text and speech on; the workload has no audio track).
1b. **ViFusion, screen text off**: the same run with ``screen_text=False``, right after it.
   ``screen text cost`` = 1 - on / off: what deciding that these frames (photos and moving
   shapes, no text) hold no text costs indexing (aim: at most 15%).
2. **Baseline**: ``ray.data.read_videos`` (decodes and colour-converts every frame with
   decord) -> ``filter`` keeping the same frame indices as ViFusion -> ``map`` resizing to a
   short side of 224 with PIL -> ``map_batches`` with a callable class holding ViFusion's
   ``Embedder``, batch 16, one actor with the same torch thread count. Ray Data fuses
   read+filter into the read tasks and the resize into the embedding actor. Model load is
   excluded (see ``bench_baseline``).
3. **Model-only bound**: ``Embedder.embed_frames`` alone on frames already decoded into
   memory (uint8, short side 224), batch 16, same threads.
4. **Decode only**: ``vifusion.extract.decode.open_sampled`` alone over the workload in this
   process (probe included), its CPU seconds: what decoding costs ViFusion's extractor; and
   the same over 1280x720 30 fps videos with a keyframe every 2 s and every 10 s (60 s each).
   For each, decoded frames per sampled frame (frames out of the decoder), and against it the
   PyAV path before the decode plan (``decode_every_frame``: every frame decoded on one
   thread, the sampled ones scaled by libswscale), in CPU seconds for the same frames.

It prints the workload, a table (method, frames, seconds, frames/s), the ratios
ViFusion / baseline and ViFusion / model-only, the cost of screen text, and last one line of JSON with every figure.

The videos are written once with ``vifusion.samples.write_video`` into
/tmp/vifusion-bench/extract/ (``--cache``) and reused by later runs.

Run (from the repository root):

    .venv/bin/python benchmarks/extract.py           # 6 videos x 60 s, 640x360, 30 fps
    .venv/bin/python benchmarks/extract.py --quick   # 2 videos x 20 s: under a minute
    .venv/bin/python benchmarks/extract.py --threads 1   # torch threads (default: Config.threads)

Ray gets one logical CPU per core. ViFusion's extractor reserves one (its shards none); the
baseline's embedding actor reserves one and its read tasks run on the other. The torch thread
count is the same in all three. Figures vary with other load on the host.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import itertools
import json
import logging
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from _common import machine  # benchmarks/ is on sys.path when a script here runs

from vifusion.config import Config
from vifusion.extract.decode import (
    DecodeStats,
    decode,
    open_sampled,
    output_size,
    probe,
    sample_frames,
)
from vifusion.samples import MOTION, PHOTOS, render, write_video

SIZE = (640, 360)  # (width, height) of the workload videos
FPS = 30
SCENE_S = 10.0
BATCH = 16  # frames per model forward pass, every method
SHORT_SIDE = 224
MODEL_ONLY_MIN_FRAMES = 128  # the model-only run embeds this many frames at least (cycled)
MODEL_ONLY_MAX_FRAMES = 320  # and at most
SCENES = [*PHOTOS, MOTION]
HD = (1280, 720)  # the decode-only workloads' size, one 60-s video per keyframe interval
HD_KEYFRAME_S = (2, 10)


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
        print(f"writing {path} (once; reused by later runs)", flush=True)
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


def bench_vifusion(cfg: Config, wl: Workload, method: str = "vifusion") -> Result:
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
    return Result(method, frames, seconds)


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


def _keep_filter(keep: dict[str, list[int]]) -> Callable[[dict[str, Any]], bool]:
    """A row predicate keeping the frames ViFusion samples (read_videos gives each row's path)."""
    wanted = {path: frozenset(indices) for path, indices in keep.items()}

    def keep_row(row: dict[str, Any]) -> bool:
        return row["frame_index"] in wanted[str(Path(row["path"]).resolve())]

    return keep_row


def _resize_row(row: dict[str, Any]) -> dict[str, Any]:
    """Short side to 224, aspect kept, with PIL (its BILINEAR filter antialiases downscales)."""
    from PIL import Image

    frame = row["frame"]
    w, h = output_size(frame.shape[1], frame.shape[0], SHORT_SIDE)
    row["frame"] = np.asarray(Image.fromarray(frame).resize((w, h), Image.BILINEAR))
    return row


def warm_up_readers(path: Path) -> None:
    """Read a short video once, so the read task workers have imported ray.data and decord
    (ViFusion's extractor did the same during its warm-up video)."""
    import ray

    ds = ray.data.read_videos([str(path)], include_paths=True, override_num_blocks=1)
    ds.filter(lambda row: row["frame_index"] == 0).materialize()


def bench_baseline(cfg: Config, wl: Workload, threads: int, cache_dir: Path) -> Result:
    """read_videos -> filter -> resize -> map_batches(Embedder), one actor, batch 16.

    Model load is excluded: ``wait_for_min_actors_s`` makes Ray Data start the actor (and
    load the model) before it launches any read task, and the time counted runs from the
    moment the model is loaded (stamped by the actor) to the end of ``materialize()``. No
    decoding can overlap the load, so neither side gets it for free.
    """
    import ray
    from ray.data import ActorPoolStrategy, DataContext

    DataContext.get_current().wait_for_min_actors_s = 600
    paths = [str(p) for p in wl.videos]
    ds = (
        # One read task per video. Left to itself Ray Data splits each task's output
        # (SplitBlocks), which stops it fusing the filter into the read: every decoded
        # 640x360 frame (~0.7 MB) would then go through the object store to a filter task.
        ray.data.read_videos(paths, include_paths=True, override_num_blocks=len(paths))
        .filter(_keep_filter(wl.keep))
        .map(_resize_row)
        .map_batches(
            EmbedFrames,
            fn_constructor_kwargs={
                "threads": threads,
                "conse_top_k": cfg.conse_top_k,
                "cache_dir": cache_dir,
            },
            batch_size=BATCH,
            batch_format="numpy",
            compute=ActorPoolStrategy(size=1),
            num_cpus=1,
        )
    )
    out = ds.materialize()
    end = time.time()
    rows = out.count()
    if rows != wl.frames:
        raise SystemExit(f"baseline embedded {rows} frames, ViFusion {wl.frames}")
    # One actor, so one value; time.time() in the actor and here read the same clock (one host).
    ready_at = float(out.take_batch(1, batch_format="numpy")["ready_at"][0])
    return Result("baseline (ray.data)", rows, end - ready_at)


# --------------------------------------------------------------------------- 3. model only


def _sampled_frames(wl: Workload, cfg: Config) -> Iterator[np.ndarray]:
    """The workload's sampled frames, one by one, decoded and resized as ViFusion does."""
    for path in wl.videos:
        for batch, _ in decode(path, cfg.sample_fps, cfg.max_frames, SHORT_SIDE, BATCH):
            yield from batch


def decoded_batches(wl: Workload, cfg: Config, count: int) -> list[np.ndarray]:
    """``count`` sampled frames in batches of BATCH (cycled when the workload has fewer)."""
    frames = list(itertools.islice(_sampled_frames(wl, cfg), count))
    frames = [frames[i % len(frames)] for i in range(count)]
    return [np.stack(frames[i : i + BATCH]) for i in range(0, count, BATCH)]


def bench_model_only(cfg: Config, wl: Workload, threads: int, cache_dir: Path) -> Result:
    """Embedder.embed_frames in this process on frames already in memory."""
    import torch

    from vifusion.extract.model import Embedder

    torch.set_num_threads(threads)
    count = min(max(wl.frames, MODEL_ONLY_MIN_FRAMES), MODEL_ONLY_MAX_FRAMES)
    batches = decoded_batches(wl, cfg, count)
    with contextlib.redirect_stdout(io.StringIO()):  # the weights loader prints
        embedder = Embedder(cfg.conse_top_k, torch.device("cpu"), cache_dir)
    embedder.embed_frames(batches[0])  # warm-up: first-call allocations
    t0 = time.perf_counter()
    for frames in batches:
        embedder.embed_frames(frames)
    seconds = time.perf_counter() - t0
    return Result("model only", count, seconds)


# --------------------------------------------------------------------------- 4. decode only


@dataclass(frozen=True)
class Decoding:
    workload: str
    sampled: int
    decoded: int  # frames out of the decoder
    cpu_s: float
    seconds: float


def decode_only(name: str, videos: list[Path], cfg: Config) -> Decoding:
    """``open_sampled`` over ``videos`` in this process, probe included."""
    stats, sampled = DecodeStats(), 0
    t0, cpu = time.perf_counter(), time.process_time()
    for path in videos:
        _, _, batches = open_sampled(
            path, cfg.sample_fps, cfg.max_frames, SHORT_SIDE, BATCH, stats=stats
        )
        sampled += sum(len(frames) for frames, _ in batches)
    cpu_s, seconds = time.process_time() - cpu, time.perf_counter() - t0
    return Decoding(name, sampled, stats.decoded, cpu_s, seconds)


def decode_every_frame(name: str, videos: list[Path], cfg: Config) -> Decoding:
    """The PyAV path before the decode plan (issue 52's baseline): one codec thread, every
    frame decoded, each sampled one (ViFusion's policy) converted to RGB at the model's size
    by libswscale (kinder to it than the numpy resize it used)."""
    import av

    decoded = sampled = 0
    t0, cpu = time.perf_counter(), time.process_time()
    for path in videos:
        keep = {i for i, _, _ in sample_frames(probe(path), cfg.sample_fps, cfg.max_frames)}
        with av.open(str(path)) as c:
            stream = c.streams.video[0]
            stream.thread_type, stream.codec_context.thread_count = "SLICE", 1
            width, height = output_size(stream.width, stream.height, SHORT_SIDE)
            for i, frame in enumerate(c.decode(stream)):
                decoded += 1
                if i in keep:
                    frame.to_ndarray(width=width, height=height, format="rgb24")
                    sampled += 1
    cpu_s, seconds = time.process_time() - cpu, time.perf_counter() - t0
    return Decoding(name, sampled, decoded, cpu_s, seconds)


def _ensure_hd(cache: Path, keyframe_s: int) -> Path:
    """A 60-s 1280x720 30 fps H.264 video of the scenes with a keyframe every ``keyframe_s``
    (exactly: no scene-cut keyframes), written once."""
    import av

    path = cache / f"{HD[0]}x{HD[1]}-{FPS}fps" / f"keyframes-{keyframe_s}s-60s.mp4"
    if path.exists():
        return path
    print(f"writing {path} (once; reused by later runs)", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    part, gop = path.with_name(path.stem + ".part.mp4"), keyframe_s * FPS
    with av.open(str(part), "w", options={"movflags": "faststart"}) as c:
        stream = c.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = *HD, "yuv420p"
        stream.options = {
            "preset": "veryfast",
            "crf": "20",
            "x264-params": f"mbtree=0:keyint={gop}:min-keyint={gop}:scenecut=0",
        }
        for i, rgb in enumerate(render(SCENES, 60.0 / len(SCENES), FPS, HD)):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, FPS)
            c.mux(stream.encode(frame))
        c.mux(stream.encode(None))
    part.replace(path)
    return path


def bench_decode_only(cfg: Config, wl: Workload, cache: Path) -> list[tuple[Decoding, Decoding]]:
    """Decoding alone, ViFusion's and the baseline's (``decode_every_frame``) in turn: the
    workload, then one 720p video per keyframe interval."""
    work = [(f"{SIZE[0]}x{SIZE[1]}, workload", wl.videos)] + [
        (f"{HD[0]}x{HD[1]}, keyframe {k} s", [_ensure_hd(cache, k)]) for k in HD_KEYFRAME_S
    ]
    pairs = [(decode_only(n, v, cfg), decode_every_frame(n, v, cfg)) for n, v in work]
    if pairs[0][0].sampled != wl.frames or pairs[0][1].sampled != wl.frames:
        raise SystemExit(f"decode gave {pairs[0][0].sampled} frames, the policy {wl.frames}")
    return pairs


# --------------------------------------------------------------------------- report


def quiet_ray_data() -> None:
    """No progress bars or per-dataset INFO lines: the report stays readable."""
    from ray.data import DataContext

    DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)  # "bars disabled"
    warnings.filterwarnings("ignore", message="Use 'expr' instead of 'fn'")


def print_table(results: list[Result]) -> None:
    print(f"{'method':<22}{'frames':>8}{'seconds':>10}{'frames/s':>10}")
    for r in results:
        print(f"{r.method:<22}{r.frames:>8}{r.seconds:>10.2f}{r.fps:>10.1f}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2 videos x 20 s (under a minute)")
    p.add_argument(
        "--threads", type=int, default=0, help="torch threads everywhere; 0: Config.threads"
    )
    p.add_argument(
        "--cache", type=Path, default=Path("/tmp/vifusion-bench/extract"), help="video cache"
    )
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
    print(
        f"workload: {len(wl.videos)} videos x {seconds:g} s, {SIZE[0]}x{SIZE[1]}, {FPS} fps, "
        f"{len(wl.videos) * seconds * FPS:.0f} frames decoded, {wl.frames} sampled "
        f"({cfg.sample_fps:g}/s); batch {BATCH}, {threads} torch threads",
        flush=True,
    )

    # Model-only first, before Ray starts: the bound is measured with nothing else running.
    model_only = bench_model_only(cfg, wl, threads, models)
    pairs = bench_decode_only(cfg, wl, args.cache)
    decodings = [ours for ours, _ in pairs]
    main_decoding = decodings[0]
    decode_only = Result("decode only", main_decoding.sampled, main_decoding.seconds)
    decode_cpu_s = main_decoding.cpu_s
    ray.init(
        num_cpus=os.cpu_count(),
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    quiet_ray_data()
    try:
        vifusion = bench_vifusion(cfg, wl)  # closes its actors: the baseline needs both CPUs
        no_text = bench_vifusion(
            cfg.model_copy(update={"screen_text": False}), wl, "vifusion, text off"
        )
        warm_up_readers(wl.warmup)
        baseline = bench_baseline(cfg, wl, threads, models)
    finally:
        ray.shutdown()

    print_table([vifusion, no_text, baseline, model_only, decode_only])
    for d, every in pairs:
        print(
            f"decode only, {d.workload}: {d.cpu_s:.2f} CPU s, "
            f"{d.cpu_s / d.sampled * 1000:.1f} ms a sampled frame, "
            f"{d.decoded / d.sampled:.2f} decoded frames per sampled frame; every frame "
            f"decoded: {every.cpu_s:.2f} CPU s, {every.decoded / every.sampled:.2f}: "
            f"{every.cpu_s / d.cpu_s:.2f}x  (aim >= 3x at 720p)"
        )
    speedup = vifusion.fps / baseline.fps
    fraction = vifusion.fps / model_only.fps
    print(f"ViFusion / baseline:   {speedup:.2f}x  (aim >= 1.5x)")
    print(f"ViFusion / model-only: {fraction:.0%}  (aim >= 80%)")
    text_cost = 1 - vifusion.fps / no_text.fps
    print(f"screen text cost:      {text_cost:.0%} of frames/s without it  (aim <= 15%)")
    print(
        json.dumps(
            {
                "benchmark": "extract",
                "quick": args.quick,
                "frames": wl.frames,
                "vifusion_fps": round(vifusion.fps, 2),
                "no_screen_text_fps": round(no_text.fps, 2),
                "screen_text_cost": round(text_cost, 3),
                "baseline_fps": round(baseline.fps, 2),
                "model_only_fps": round(model_only.fps, 2),
                "speedup_vs_baseline": round(speedup, 3),
                "fraction_of_model_bound": round(fraction, 3),
                "vifusion_s": round(vifusion.seconds, 3),
                "baseline_s": round(baseline.seconds, 3),
                "model_only_s": round(model_only.seconds, 3),
                "model_only_frames": model_only.frames,
                "decode_only_fps": round(decode_only.fps, 2),
                "decode_only_cpu_s": round(decode_cpu_s, 3),
                "decoding": [
                    {
                        "workload": d.workload,
                        "sampled": d.sampled,
                        "decoded_per_sampled": round(d.decoded / d.sampled, 2),
                        "cpu_s": round(d.cpu_s, 3),
                        "every_frame_cpu_s": round(every.cpu_s, 3),
                        "every_frame_over_vifusion": round(every.cpu_s / d.cpu_s, 2),
                    }
                    for d, every in pairs
                ],
                "threads": threads,
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "machine": machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
