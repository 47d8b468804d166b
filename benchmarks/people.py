"""People and faces (extract/people.py): what finding faces costs ingest, and how right it is.

1. **Ingest**: ``benchmarks/extract.py``'s ViFusion run (``index_files`` over its workload, the
   extractor's real path) with ``people=False`` (the baseline) and ``people=True``, alternated
   ``--rounds`` times back to back; frames/s of each and the ratio on / off (aim >= 0.85).
2. **Detector alone**: ms a frame of ``PeopleDetector.terms`` on the workload's sampled frames
   at the embedder's size, beside ``Embedder.embed_frames`` on the same frames.
3. **Right and wrong**: on scikit-image's photos at the embedder's size (short side 224),
   labelled by eye here: which show a face. Precision and recall of "a face is there".

Run (from the repository root):

    .venv/bin/python benchmarks/people.py --quick   # 2 videos x 20 s, one round
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine  # noqa: E402
from extract import BATCH, bench_vifusion, decoded_batches, make_workload  # noqa: E402

from vifusion.config import Config  # noqa: E402

# scikit-image photos (samples.PHOTOS and a few more of the wheel's), labelled by eye
FACES = ("astronaut", "camera")
NO_FACE = ("coffee", "chelsea", "rocket", "retina", "hubble_deep_field")
NO_FACE += ("coins", "immunohistochemistry", "colorwheel", "logo", "page", "brick", "grass")
NO_FACE += ("gravel", "cell", "clock", "moon", "text")


def _photo(name: str) -> np.ndarray:
    import cv2
    import skimage.data

    rgb = getattr(skimage.data, name)()
    if rgb.ndim == 2:
        rgb = np.stack([rgb] * 3, axis=-1)
    rgb = np.ascontiguousarray(rgb[..., :3]).astype(np.uint8)
    h, w = rgb.shape[:2]
    return cv2.resize(rgb, (round(w * 224 / h), 224), interpolation=cv2.INTER_AREA)


def precision_recall() -> dict:
    from vifusion.extract.people import PeopleDetector

    det = PeopleDetector()
    found = {n: bool(det.terms(_photo(n)[None])[0][0]) for n in (*FACES, *NO_FACE)}
    tp = sum(found[n] for n in FACES)
    fp = sum(found[n] for n in NO_FACE)
    return {
        "photos_with_face": len(FACES),
        "photos_without": len(NO_FACE),
        "true_positives": tp,
        "false_positives": fp,
        "precision": round(tp / max(tp + fp, 1), 3),
        "recall": round(tp / len(FACES), 3),
        "false": [n for n in NO_FACE if found[n]] + [n for n in FACES if not found[n]],
    }


def detector_cost(cfg: Config, wl, cache: Path) -> tuple[float, float]:
    """(detector ms a frame, embedder ms a frame) on the workload's sampled frames."""
    import torch

    from vifusion.extract.model import Embedder
    from vifusion.extract.people import PeopleDetector

    torch.set_num_threads(cfg.torch_threads or cfg.threads)
    batches = decoded_batches(wl, cfg, 160)
    det, emb = PeopleDetector(), Embedder(cfg.conse_top_k, cache_dir=cache / "models")
    det.terms(batches[0]), emb.embed_frames(batches[0])  # warm
    n = sum(len(b) for b in batches)
    t0 = time.perf_counter()
    for b in batches:
        det.terms(b)
    t1 = time.perf_counter()
    for b in batches:
        emb.embed_frames(b)
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1000, (t2 - t1) / n * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 videos x 20 s")
    p.add_argument("--rounds", type=int, default=1, help="off/on pairs, alternated")
    p.add_argument("--cache", type=Path, default=Path("/tmp/vifusion-bench/extract"))
    args = p.parse_args()
    import ray

    base = Config(embed_batch=BATCH)
    cfg = base.model_copy(update={"torch_threads": base.torch_threads or base.threads})
    num_videos, seconds = (2, 20.0) if args.quick else (6, 60.0)
    wl = make_workload(args.cache, num_videos, seconds, cfg)
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f}", flush=True)
    print(f"workload: {len(wl.videos)} videos x {seconds:g} s, {wl.frames} sampled frames")
    right = precision_recall()
    print(
        f"faces on {right['photos_with_face']} + {right['photos_without']} photos: "
        f"precision {right['precision']}, recall {right['recall']} (wrong: {right['false']})"
    )
    det_ms, emb_ms = detector_cost(cfg, wl, args.cache)
    print(f"detector alone {det_ms:.1f} ms a frame; embedder alone {emb_ms:.1f} ms a frame")
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level=logging.WARNING)
    off, on = [], []
    try:
        for _ in range(args.rounds):
            off.append(bench_vifusion(cfg.model_copy(update={"people": False}), wl, "off"))
            on.append(bench_vifusion(cfg.model_copy(update={"people": True}), wl, "on"))
    finally:
        ray.shutdown()
    off_fps = sum(r.frames for r in off) / sum(r.seconds for r in off)
    on_fps = sum(r.frames for r in on) / sum(r.seconds for r in on)
    print(f"ingest, people off (baseline): {off_fps:.2f} frames/s")
    print(f"ingest, people on:             {on_fps:.2f} frames/s")
    print(f"on / off: {on_fps / off_fps:.2f}x  (aim >= 0.85x)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(
        json.dumps(
            {
                "benchmark": "people",
                "quick": args.quick,
                "frames": wl.frames,
                "rounds": args.rounds,
                "off_fps": round(off_fps, 2),
                "on_fps": round(on_fps, 2),
                "ratio": round(on_fps / off_fps, 3),
                "detector_ms_per_frame": round(det_ms, 2),
                "embedder_ms_per_frame": round(emb_ms, 2),
                **{k: v for k, v in right.items() if k != "false"},
            }
        )
    )


if __name__ == "__main__":
    main()
