"""`vifusion demo`: sample videos from real photos and a short spoken talk with a slide,
indexed, then searched by what is seen (words, an image, a clip), said and written.

Every query has a known answer (which video, which seconds), so the table shows at a
glance whether the product finds the right moment, and how fast. The talk is spoken by
espeak-ng; without it the demo says so and searches what is seen only.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vifusion.config import Config
from vifusion.datadir import SAMPLES
from vifusion.samples import SampleVideo, frame_at, write_clip, write_demo_set
from vifusion.samples import talks as _talks
from vifusion.types import Segment


@dataclass(frozen=True)
class DemoQuery:
    label: str
    kind: str  # text | image | clip
    payload: object
    video: str
    start_s: float
    end_s: float


def distorted_frame(video: SampleVideo, t: float) -> np.ndarray:
    """The frame at ``t``, cropped to its central 80%, mirrored and scaled to 70%:
    an example image that is not byte-identical to anything indexed."""
    from PIL import Image

    frame = frame_at(video.path, t)
    h, w = frame.shape[:2]
    crop = frame[h // 10 : h - h // 10, w // 10 : w - w // 10, :][:, ::-1]
    img = Image.fromarray(np.ascontiguousarray(crop))
    return np.asarray(img.resize((int(img.width * 0.7), int(img.height * 0.7))))


def demo_queries(videos: dict[str, SampleVideo], work: Path) -> list[DemoQuery]:
    kitchen, launch, street = videos["kitchen.mp4"], videos["launch.mp4"], videos["street.mp4"]
    cat, coffee = kitchen.scene_of("chelsea"), kitchen.scene_of("coffee")
    rocket, moto = launch.scene_of("rocket"), street.scene_of("motorcycle")
    astro, camera = launch.scene_of("astronaut"), street.scene_of("camera")
    clip_start = camera.start_s + 0.5
    clip = write_clip(
        street.path, work / "query-clip.mp4", clip_start, clip_start + 3.0, (192, 144)
    )
    t_img = (astro.start_s + astro.end_s) / 2
    return [
        DemoQuery("text: a cat", "text", "a cat", "kitchen.mp4", cat.start_s, cat.end_s),
        DemoQuery(
            "text: a cup of coffee",
            "text",
            "a cup of coffee",
            "kitchen.mp4",
            coffee.start_s,
            coffee.end_s,
        ),
        DemoQuery("text: a rocket", "text", "a rocket", "launch.mp4", rocket.start_s, rocket.end_s),
        DemoQuery(
            "text: a motorcycle", "text", "a motorcycle", "street.mp4", moto.start_s, moto.end_s
        ),
        DemoQuery(
            f"image: launch @ {t_img:.0f}s, cropped+flipped",
            "image",
            distorted_frame(launch, t_img),
            "launch.mp4",
            t_img - 1,
            t_img + 1,
        ),
        DemoQuery(
            "clip: street 3 s, 192x144", "clip", clip, "street.mp4", clip_start, clip_start + 3.0
        ),
    ]


# The talk: said over its first seconds, then a slide; each searched by other words than its own.
TALK = "talk.mp4"
TALK_S = 12.0
SAID = (1.0, "Our bakery sells more sourdough bread than croissants on weekends.")
SLIDE = (7.0, TALK_S, ("Glacier retreat:", "40 metres per year"))


def talk_queries(work: Path) -> list[DemoQuery]:
    """The talk written under ``work``, and a spoken and an on-screen query that find it."""
    talk = _talks.write_talk(work / TALK, TALK_S, said=[SAID], shown=[SLIDE])
    said, shown = talk.said[0], talk.shown[0]
    return [
        DemoQuery(
            "said: sourdough bread at the bakery",
            "text",
            "sourdough bread at the bakery",
            TALK,
            said.start_s,
            said.end_s,
        ),
        DemoQuery(
            "on screen: glacier retreat",
            "text",
            "glacier retreat",
            TALK,
            shown.start_s,
            shown.end_s,
        ),
    ]


def overlaps(seg: Segment, start_s: float, end_s: float) -> bool:
    return seg.start_s < end_s and start_s < seg.end_s


def run_demo(cfg: Config) -> int:
    from vifusion.cli.commands import cmd_index
    from vifusion.runtime import Runtime

    work = cfg.data_dir / SAMPLES
    work.mkdir(parents=True, exist_ok=True)
    print(f"writing sample videos to {work} ...")
    videos = {v.name: v for v in write_demo_set(work)}
    queries = demo_queries(videos, work)
    paths = [v.path for v in videos.values()]
    if _talks.have_espeak():
        queries += talk_queries(work)
        paths.append(work / TALK)
    else:
        print("espeak-ng is not installed: no spoken talk, so only what is seen is searched")
    code = cmd_index(cfg, paths)
    if code != 0:
        return code

    rows, passed = [], 0
    with Runtime(cfg) as rt:
        search = {"text": rt.searcher.text, "image": rt.searcher.image, "clip": rt.searcher.clip}
        search["text"]("warm-up")
        for q in queries:
            t0 = time.perf_counter()
            top = search[q.kind](q.payload, 5)
            ms = (time.perf_counter() - t0) * 1000
            first = top[0] if top else None
            video = rt.catalog.get_video(first.video_id) if first else None
            got = (
                f"{video.title}.mp4 {first.start_s:.1f}-{first.end_s:.1f}s" if first else "nothing"
            )
            ok = bool(
                first
                and video
                and Path(video.source).name == q.video
                and overlaps(first, q.start_s, q.end_s)
            )
            passed += ok
            rows.append(
                (
                    q.label,
                    f"{q.video} {q.start_s:.1f}-{q.end_s:.1f}s",
                    got,
                    f"{first.score:.3f}" if first else "-",
                    "yes" if ok else "NO",
                    f"{ms:.0f}",
                )
            )
    header = ("query", "expected", "ranked first", "score", "right", "ms")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    print(f"{passed}/{len(rows)} queries found the right moment")
    print(f'try: vifusion search --data-dir {cfg.data_dir} "a cat"', file=sys.stderr)
    return 0 if passed == len(rows) else 1
