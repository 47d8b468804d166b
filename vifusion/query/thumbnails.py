"""Pictures of stored videos: JPEG thumbnails at a given time, cached under the data dir."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

from PIL import Image

from vifusion.extract.decode import DecodeError, open_container

if TYPE_CHECKING:
    from vifusion.catalog import Video

THUMB_WIDTH = 320


class PastEnd(ValueError):
    """A time past the end of the video: no frame shows then."""


def frame_time(video: Video, t: float) -> float:
    """The time of the frame that shows ``t`` seconds into ``video``: the last frame shows
    until the end. PastEnd past the end, so that no time a client makes up costs a decode
    and a cache entry."""
    if not video.duration_s:  # not probed: the decoder says whether there is a frame then
        return t
    if t > video.duration_s:
        raise PastEnd(f"t={t:g} s is past the end of video {video.id} ({video.duration_s:g} s)")
    return min(t, max(0.0, video.duration_s - 1.0 / (video.fps or 25.0)))


class ThumbnailCache:
    """JPEG thumbnails of stored videos, on disk under ``root/<video_id>/``, one per tenth
    of a second and width, at most ``max_bytes`` in all: a new one drops the least recently
    used until they fit. What an earlier run left is counted at the start, oldest first (a
    hit touches its file, so the order outlives a restart). Safe to share between threads."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.bytes = 0  # what the files below hold
        self._lock = threading.Lock()
        self._sizes: OrderedDict[Path, int] = OrderedDict()  # the least recently used first
        found = []
        for path in self.root.glob("*/*"):
            with contextlib.suppress(OSError):
                if path.suffix != ".jpg":  # a write cut short
                    path.unlink()
                    continue
                st = path.stat()
                found.append((st.st_mtime, path, st.st_size))
        with self._lock:
            for _, path, size in sorted(found):
                self._add(path, size)
            self._evict()

    def get(self, video_id: int, video: Path, t: float, width: int = THUMB_WIDTH) -> bytes:
        """A JPEG of the frame shown at ``t`` seconds of the file ``video``, ``width`` wide.
        PastEnd where ``t`` is past the video's last frame (nothing is cached then)."""
        if t < 0:
            raise ValueError(f"t must be >= 0, got {t}")
        path = self.root / str(video_id) / f"{round(t * 10)}-{width}.jpg"
        with self._lock:
            cached = path in self._sizes
            if cached:
                self._sizes.move_to_end(path)
        if cached:
            with contextlib.suppress(FileNotFoundError):  # evicted or dropped since
                data = path.read_bytes()
                os.utime(path)
                return data
        data = _render(video, t, width)
        # A cache that cannot be written (a full disk) still lets the thumbnail be served.
        with contextlib.suppress(OSError):
            self._store(path, data)
        return data

    def drop(self, video_id: int) -> None:
        """Forget a video's thumbnails (it was deleted)."""
        folder = self.root / str(video_id)
        with self._lock:
            for path in [p for p in self._sizes if p.parent == folder]:
                self.bytes -= self._sizes.pop(path)
            shutil.rmtree(folder, ignore_errors=True)

    def _store(self, path: Path, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        with self._lock:
            os.replace(tmp, path)  # readers see a whole file or none
            self.bytes -= self._sizes.pop(path, 0)
            self._add(path, len(data))
            self._evict()

    def _add(self, path: Path, size: int) -> None:
        self._sizes[path] = size
        self.bytes += size

    def _evict(self) -> None:
        while self.bytes > self.max_bytes:
            path, size = self._sizes.popitem(last=False)
            path.unlink(missing_ok=True)
            self.bytes -= size


def _render(video: Path, t: float, width: int) -> bytes:
    """Seeks to the keyframe before ``t`` and decodes forward: at most one keyframe
    interval of decoding."""
    image = _frame_at(video, t)
    height = max(1, round(image.height * width / image.width))
    buf = io.BytesIO()
    image.resize((width, height), Image.BILINEAR).save(buf, format="JPEG", quality=82)
    return buf.getvalue()


def _frame_at(video: Path, t: float) -> Image.Image:
    try:  # the decoder's restricted open: a file swapped since its probe reads nothing else
        opened = open_container(video, str(video))
    except DecodeError as e:
        raise ValueError(str(e)) from None
    with opened as container:
        stream = container.streams.video[0]
        stream.thread_count = 1
        if stream.time_base and t > 0:
            container.seek(int(t / stream.time_base), stream=stream, backward=True, any_frame=False)
        last = None
        for frame in container.decode(stream):
            last = frame
            if frame.time is not None and frame.time + 1e-3 >= t:
                break
        else:  # the stream ended before t: the last frame shows for one frame's time
            rate = stream.average_rate or stream.guessed_rate
            if (
                last is not None
                and last.time is not None
                and t > last.time + (float(1 / rate) if rate else 0) + 1e-3
            ):
                raise PastEnd(f"{video.name}: t={t:g} s is past the end of the video")
        if last is None:
            raise ValueError(f"{video.name}: no frame at {t} s")
        return last.to_image()
