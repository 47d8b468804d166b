"""Real videos whose content is known, made offline from the photos scikit-image ships.

Each scene is a slow pan and zoom over one photo (or, for ``"motion"``, coloured shapes
moving over a gradient), so a test can ask "is the frame at 5 s the cat?" and know the
answer. Everything is seeded: the same arguments write the same frames.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import av
import numpy as np
from PIL import Image

MOTION = "motion"

# name -> file inside skimage/data (all in the wheel: no download). ImageNet-wise they are
# far apart: tabby cat, espresso, missile/space shuttle, moped/motor scooter, ...
PHOTOS: dict[str, str] = {
    "chelsea": "chelsea.png",
    "coffee": "coffee.png",
    "rocket": "rocket.jpg",
    "astronaut": "astronaut.png",
    "camera": "camera.png",
    "motorcycle": "motorcycle_left.png",
    "hubble": "hubble_deep_field.jpg",
    "retina": "retina.jpg",
    "coins": "coins.png",
    "ihc": "ihc.png",
}

# Three ~12 s videos; every photo is in exactly one of them.
DEMO_SET: dict[str, tuple[str, ...]] = {
    "kitchen.mp4": ("coffee", "chelsea", MOTION),
    "launch.mp4": ("rocket", "astronaut", "hubble"),
    "street.mp4": ("motorcycle", "camera", MOTION),
}


@dataclass(frozen=True)
class Scene:
    """One scene of a sample video: ``photo`` (a name in PHOTOS or "motion") over [start_s, end_s)."""

    photo: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class SampleVideo:
    """A written sample video and the scenes it is made of, in order."""

    path: Path
    name: str
    scenes: tuple[Scene, ...]

    @property
    def duration_s(self) -> float:
        return self.scenes[-1].end_s if self.scenes else 0.0

    def scene_of(self, photo: str) -> Scene:
        """The first scene showing ``photo``; KeyError if there is none."""
        for scene in self.scenes:
            if scene.photo == photo:
                return scene
        raise KeyError(f"{self.name}: no scene of {photo!r}")

    def scene_at(self, t: float) -> Scene:
        """The scene playing at time ``t`` seconds; KeyError outside the video."""
        for scene in self.scenes:
            if scene.start_s <= t < scene.end_s:
                return scene
        raise KeyError(f"{self.name}: no scene at {t} s")


@lru_cache(maxsize=None)
def _photo(name: str) -> np.ndarray:
    from skimage import io
    from skimage.data import __file__ as data_init

    if name not in PHOTOS:
        raise KeyError(f"unknown photo {name!r}; known: {', '.join(PHOTOS)}")
    img = io.imread(Path(data_init).parent / PHOTOS[name])
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    img = np.ascontiguousarray(img[:, :, :3], dtype=np.uint8)
    img.setflags(write=False)
    return img


def photo(name: str) -> np.ndarray:
    """The named photo as (H, W, 3) uint8 RGB (greyscale photos are repeated to 3 channels)."""
    return _photo(name).copy()


def _seed(*parts: object) -> int:
    # crc32, not hash(): str hashing is salted per process and output must be deterministic.
    return zlib.crc32("/".join(map(str, parts)).encode())


def _ease(u: np.ndarray | float) -> np.ndarray | float:
    return 0.5 - 0.5 * np.cos(np.pi * u)


def _pan_zoom(
    name: str, n: int, size: tuple[int, int], seed: int, zoom_in: bool
) -> Iterator[np.ndarray]:
    img = Image.fromarray(_photo(name))
    w_img, h_img = img.size
    w, h = size
    aspect = w / h
    # Largest window of the output's aspect that fits the photo, then zoom to 75% of it.
    full_w = min(w_img, h_img * aspect)
    z0, z1 = (1.0, 0.75) if zoom_in else (0.75, 1.0)
    rng = np.random.default_rng(seed)
    f0, f1 = rng.uniform(0.2, 0.8, size=2), rng.uniform(0.2, 0.8, size=2)
    for i in range(n):
        u = _ease(i / max(1, n - 1))
        cw = full_w * (z0 + (z1 - z0) * u)
        ch = cw / aspect
        fx, fy = f0 + (f1 - f0) * u
        x0 = fx * (w_img - cw)
        y0 = fy * (h_img - ch)
        # A float box gives sub-pixel motion: the pan is smooth, not 1-pixel jumps.
        frame = img.resize((w, h), Image.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))
        yield np.asarray(frame)


def _motion(n: int, fps: int, size: tuple[int, int], seed: int) -> Iterator[np.ndarray]:
    w, h = size
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    xs, ys = xx[:1] / (w + h), yy[:, :1] / (w + h)
    base = rng.uniform(0, 255, size=(2, 3)).astype(np.float32)
    k = 6
    span = np.array([w, h], dtype=np.float64)
    pos = rng.uniform(0, 1, size=(k, 2)) * span
    vel = rng.uniform(-0.4, 0.4, size=(k, 2)) * span  # pixels per second
    radius = rng.uniform(0.06, 0.15, size=k) * min(w, h)
    colours = rng.integers(0, 256, size=(k, 3), dtype=np.uint8)
    square = rng.random(k) < 0.5
    for i in range(n):
        t = i / fps
        # A gradient whose direction turns slowly, so the background moves too.
        a = 0.3 * t
        g = (xs * np.cos(a) + ys * np.sin(a) + 0.5).clip(0, 1)[:, :, None]
        frame = (base[0] + (base[1] - base[0]) * g).astype(np.uint8)
        # Shapes bounce off the edges: fold the straight-line position back into the frame.
        p = (pos + vel * t) % (2 * span)
        p = np.where(p > span, 2 * span - p, p)
        for j in range(k):
            r = radius[j]
            x0, x1 = max(0, int(p[j, 0] - r)), min(w, int(p[j, 0] + r) + 1)
            y0, y1 = max(0, int(p[j, 1] - r)), min(h, int(p[j, 1] + r) + 1)
            if square[j]:
                frame[y0:y1, x0:x1] = colours[j]
            else:
                dx, dy = xx[y0:y1, x0:x1] - p[j, 0], yy[y0:y1, x0:x1] - p[j, 1]
                frame[y0:y1, x0:x1][dx * dx + dy * dy < r * r] = colours[j]
        yield frame


def render(
    photos: Sequence[str], scene_s: float = 4.0, fps: int = 24, size: tuple[int, int] = (320, 240)
) -> Iterator[np.ndarray]:
    """The (h, w, 3) uint8 RGB frames that write_video encodes, in order (before compression)."""
    per_scene = round(scene_s * fps)
    for idx, name in enumerate(photos):
        seed = _seed(idx, name, per_scene, fps, *size)
        if name == MOTION:
            yield from _motion(per_scene, fps, size, seed)
        else:
            yield from _pan_zoom(name, per_scene, size, seed, zoom_in=idx % 2 == 0)


class _Encoder:
    """libx264 / yuv420p / mp4 writer; frames get pts 0, 1, 2, ... at 1/fps."""

    def __init__(self, path: Path, fps: int | Fraction, size: tuple[int, int], crf: int = 20):
        path.parent.mkdir(parents=True, exist_ok=True)
        w, h = size
        if w % 2 or h % 2:
            raise ValueError(f"size {size}: yuv420p needs even width and height")
        # faststart: the index (moov) goes first, as in web video; a truncated file then still
        # opens and fails mid-stream, which is the harder case for a decoder to report.
        self.container = av.open(str(path), "w", options={"movflags": "faststart"})
        self.stream = self.container.add_stream("libx264", rate=Fraction(fps))
        self.stream.width, self.stream.height = w, h
        self.stream.pix_fmt = "yuv420p"
        # mbtree off: with it, libx264 output varied from run to run (same input frames).
        self.stream.options = {"preset": "veryfast", "crf": str(crf), "x264-params": "mbtree=0"}
        self.time_base = Fraction(1) / Fraction(fps)
        self.n = 0

    def write(self, rgb: np.ndarray | av.VideoFrame) -> None:
        frame = (
            rgb
            if isinstance(rgb, av.VideoFrame)
            else av.VideoFrame.from_ndarray(rgb, format="rgb24")
        )
        frame.pts, frame.time_base = self.n, self.time_base
        self.n += 1
        self.container.mux(self.stream.encode(frame))

    def close(self) -> None:
        self.container.mux(self.stream.encode(None))
        self.container.close()

    def __enter__(self) -> _Encoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_video(
    path: Path,
    photos: Sequence[str],
    scene_s: float = 4.0,
    fps: int = 24,
    size: tuple[int, int] = (320, 240),
    crf: int = 20,
) -> SampleVideo:
    """Write one scene of ``scene_s`` s per photo (pan and zoom; "motion": moving shapes) as
    H.264 mp4. ``size`` is (width, height), both even. ``crf``: x264's quality, 20 a small
    file (about 0.2 Mbit/s at 320x240); 0 lossless, about 3.6 Mbit/s there (a web 720p
    video's bitrate, for tests of what crosses a link)."""
    path = Path(path)
    per_scene = round(scene_s * fps)
    scenes = tuple(
        Scene(name, i * per_scene / fps, (i + 1) * per_scene / fps) for i, name in enumerate(photos)
    )
    for name in photos:
        if name != MOTION and name not in PHOTOS:
            raise KeyError(f"unknown photo {name!r}; known: {', '.join(PHOTOS)}, {MOTION}")
    with _Encoder(path, fps, size, crf) as enc:
        for frame in render(photos, scene_s, fps, size):
            enc.write(frame)
    return SampleVideo(path=path, name=path.name, scenes=scenes)


def write_clip(src: Path, dst: Path, start_s: float, end_s: float, size: tuple[int, int]) -> Path:
    """Re-encode the frames of ``src`` whose time is in [start_s, end_s) at ``size`` (w, h, even)
    and the source frame rate; timestamps restart at 0. ValueError if no frame falls in range."""
    src, dst = Path(src), Path(dst)
    w, h = size
    with av.open(str(src)) as inp:
        stream = inp.streams.video[0]
        fps = stream.average_rate or stream.guessed_rate or Fraction(24)
        if start_s > 0:
            # Seek lands on the keyframe at or before start_s; the frames before it are skipped below.
            inp.seek(int(start_s / stream.time_base), stream=stream, backward=True)
        enc: _Encoder | None = None
        try:
            for frame in inp.decode(stream):
                t = frame.time
                if t is None or t < start_s - 1e-6:
                    continue
                if t >= end_s - 1e-6:
                    break
                if enc is None:
                    enc = _Encoder(dst, fps, size)
                enc.write(
                    frame.reformat(width=w, height=h, format="yuv420p", interpolation="BILINEAR")
                )
        finally:
            if enc is not None:
                enc.close()
    if enc is None:
        raise ValueError(f"{src.name}: no frame in [{start_s}, {end_s})")
    return dst


def write_demo_set(directory: Path) -> list[SampleVideo]:
    """Write the DEMO_SET videos (3 x 12 s, 320x240, 24 fps) into ``directory``."""
    directory = Path(directory)
    return [write_video(directory / name, photos) for name, photos in DEMO_SET.items()]


def frame_at(path: Path, t: float) -> np.ndarray:
    """The decoded frame shown at ``t`` seconds, (H, W, 3) uint8 RGB (the last one if past the end)."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        last = None
        for frame in container.decode(stream):
            if frame.time is not None and frame.time > t + 1e-6:
                break
            last = frame
        if last is None:
            raise ValueError(f"{path}: no frame at {t} s")
        return last.to_ndarray(format="rgb24")
