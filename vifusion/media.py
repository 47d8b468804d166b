"""Pictures of stored videos: JPEG thumbnails at a given time, cached under the data dir."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import av
from PIL import Image

THUMB_WIDTH = 320


def thumbnail(video: Path, t: float, cache_dir: Path, width: int = THUMB_WIDTH) -> bytes:
    """A JPEG of the frame shown at ``t`` seconds (clamped to the video), ``width`` wide.

    Seeks to the keyframe before ``t`` and decodes forward, so the cost is at most one
    keyframe interval of decoding. Cached per (file, tenth of a second).
    """
    if t < 0:
        raise ValueError(f"t must be >= 0, got {t}")
    key = f"{int(round(t * 10))}-{width}.jpg"
    cached = cache_dir / key
    if cached.exists():
        return cached.read_bytes()
    image = _frame_at(video, t)
    height = max(1, round(image.height * width / image.width))
    buf = io.BytesIO()
    image.resize((width, height), Image.BILINEAR).save(buf, format="JPEG", quality=82)
    data = buf.getvalue()
    cache_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache_dir, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, cached)  # readers see a whole file or none
    return data


def _frame_at(video: Path, t: float) -> Image.Image:
    with av.open(str(video)) as container:
        stream = container.streams.video[0]
        stream.thread_count = 1
        if stream.time_base and t > 0:
            container.seek(int(t / stream.time_base), stream=stream, backward=True, any_frame=False)
        last = None
        for frame in container.decode(stream):
            last = frame
            if frame.time is not None and frame.time + 1e-3 >= t:
                break
        if last is None:
            raise ValueError(f"{video.name}: no frame at {t} s")
        return last.to_image()
