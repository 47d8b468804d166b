"""Video decoding and the frame-sampling policy.

``sample_frames``: intervals of ``1 / sample_fps`` seconds (at most ``max_frames`` of them,
else ``max_frames`` equal ones); frame ``i`` covers ``[i / fps, (i + 1) / fps)`` (``fps``
averaged for variable-rate video). Each interval is shown by the frame inside it that costs
least to decode (within half an interval of its middle; ``_schedule.py``), and that frame's
row spans from its own timestamp to the next sampled frame's.

Decoding: PyAV only, and only what the sampled frames need (``_schedule.py``). A file is
opened once (``_files.open_regular``) and read through ``fd_path`` of that descriptor, never
the name again. The probe reads every packet (no decoding): a file holding fewer frames than
its header promises is rejected, and the packets' keyframes and timestamps plan the decoding.
Frames leave the decoder at the size asked for, scaled and converted to RGB by libswscale
(one scaler per size, kept for the video), on ``threads`` codec threads, or on the GPU's
video engine where ``gpu`` asks for it and one can be opened (``_nvdec.py``).

Opening and probing a file: ``_container.py`` (its names are re-exported here)."""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
from av.codec.hwaccel import HWAccel

from vifusion._files import fd_path
from vifusion.extract import _nvdec, _schedule
from vifusion.extract._container import (
    MAX_FRAME_PIXELS,
    DecodeError,
    Probe,
    VideoInfo,
    av_reason,
    fail,
    open_container,
    open_video,
    probe,
    probe_file,
    too_big,
)
from vifusion.extract._schedule import Stats as DecodeStats

__all__ = [
    "MAX_FRAME_PIXELS",
    "DecodeError",
    "DecodeStats",
    "VideoInfo",
    "decode",
    "open_container",
    "open_sampled",
    "open_sampled_with_text",
    "open_video",
    "output_size",
    "probe",
    "sample_frames",
]

# Share of the sampled frames that may be missing (a corrupt packet; one at least), each shown
# by the frame before it, before decoding fails instead: a glitch is fine for search, half a
# video of duplicates is not.
_FAULT_TOL = 0.05


def sample_frames(
    info: VideoInfo, sample_fps: float, max_frames: int
) -> list[tuple[int, float, float]]:
    """(frame index, t_start, t_end) of the frames to keep: one per ``1 / sample_fps`` s, the
    frame at the middle of each interval; at most ``max_frames``, spread over the whole video
    when capped; at least one; never more than one per video frame."""
    if not sample_fps > 0:
        raise ValueError(f"sample_fps must be > 0, got {sample_fps}")
    if max_frames < 1:
        raise ValueError(f"max_frames must be >= 1, got {max_frames}")
    if info.num_frames < 1 or info.fps <= 0:
        return []
    duration = info.duration_s
    rate = min(sample_fps, info.fps)
    # The epsilon keeps 12.0 s at 1 fps from becoming 13 intervals through rounding.
    n = max(1, math.ceil(duration * rate - 1e-9))
    step = 1.0 / rate
    if n > max_frames:
        n, step = max_frames, duration / max_frames
    out: list[tuple[int, float, float]] = []
    for k in range(n):
        t0 = k * step
        t1 = duration if k == n - 1 else min((k + 1) * step, duration)
        index = min(int((t0 + t1) / 2 * info.fps), info.num_frames - 1)
        if out and index <= out[-1][0]:
            # Same frame as the previous interval (a short last one): widen that one instead.
            out[-1] = (out[-1][0], out[-1][1], round(t1, 6))
            continue
        out.append((index, round(t0, 6), round(t1, 6)))
    return out


def output_size(width: int, height: int, short_side: int) -> tuple[int, int]:
    """(width, height) with the short side ``short_side`` and the aspect kept (rounded)."""
    if width <= height:
        return short_side, max(1, round(height * short_side / width))
    return max(1, round(width * short_side / height)), short_side


Spans = list[tuple[int, float, float]]  # per frame: (frame index shown, start_s, end_s)
Batches = Iterator[tuple[np.ndarray, Spans]]
# (frames at the embedder's size, their spans, the same frames at the text reader's size)
TextBatches = Iterator[tuple[np.ndarray, Spans, "np.ndarray | list[Deferred]"]]


class Deferred:
    """A sampled frame at the text reader's size, converted to RGB when first asked for
    (``frame()``): on footage without text most frames are never read, and converting each
    at that size costs about a sixth of decoding it. Holds the decoded frame till then."""

    __slots__ = ("_frame", "_rgb", "_scaler", "_size")

    def __init__(self, frame: av.VideoFrame, scaler: object, size: tuple[int, int]) -> None:
        self._frame, self._scaler, self._size = frame, scaler, size
        self._rgb: np.ndarray | None = None

    def __call__(self) -> np.ndarray:
        if self._rgb is None:
            width, height = self._size
            rgb = self._scaler.reformat(self._frame, width, height, "rgb24", threads=1)
            self._rgb, self._frame = rgb.to_ndarray(), None
        return self._rgb


def open_sampled(
    path: Path,
    sample_fps: float,
    max_frames: int,
    short_side: int = 224,
    batch: int = 16,
    follow_symlinks: bool = True,
    *,
    file: io.FileIO | None = None,
    threads: int = 1,
    gpu: bool = False,
    stats: DecodeStats | None = None,
) -> tuple[VideoInfo, int, Batches]:
    """Probe once, then decode lazily: (info, number of sampled frames, the batches that
    ``decode`` yields). DecodeError here for a file that cannot be opened at all.
    ``follow_symlinks``: False for a path stored resolved (see ``open_regular``). ``file``:
    the video already opened (``open_video``), left open; None: opened here, closed once
    read. ``threads``: the codec's threads. ``gpu``: decode on the GPU's video engine where
    one can be opened (``_nvdec.py``). ``stats``: counts what decoding cost."""
    info, total, batches = _open_sampled(
        path,
        sample_fps,
        max_frames,
        short_side,
        None,
        batch,
        follow_symlinks,
        file,
        threads,
        gpu,
        stats,
    )
    return info, total, ((frames, spans) for frames, spans, _ in batches)


def open_sampled_with_text(
    path: Path,
    sample_fps: float,
    max_frames: int,
    short_side: int,
    text_side: int,
    batch: int = 16,
    *,
    file: io.FileIO | None = None,
    threads: int = 1,
    gpu: bool = False,
) -> tuple[VideoInfo, int, TextBatches]:
    """``open_sampled``, each batch also holding its frames for reading text: short side
    ``text_side``, or the video's own where that lies between ``short_side`` and it (never
    upscaled past the video's own size, never below the embedder's). Both sizes come from the
    one decoded frame; where they are equal, both are the one array."""
    return _open_sampled(
        path, sample_fps, max_frames, short_side, text_side, batch, True, file, threads, gpu, None
    )


def _open_sampled(
    path: Path,
    sample_fps: float,
    max_frames: int,
    short_side: int,
    text_side: int | None,
    batch: int,
    follow_symlinks: bool,
    file: io.FileIO | None,
    threads: int,
    gpu: bool,
    stats: DecodeStats | None,
) -> tuple[VideoInfo, int, TextBatches]:
    path = Path(path)
    if batch < 1 or short_side < 1 or threads < 1:
        raise ValueError(
            f"batch, short_side and threads must be >= 1, got {batch}, {short_side}, {threads}"
        )
    own = file is None
    if file is None:
        file = open_video(path, follow_symlinks)
    try:
        p = probe_file(path, file)
    except BaseException:
        if own:
            file.close()
        raise
    info = p.info
    plan = _schedule.schedule(
        p.index, sample_frames(info, sample_fps, max_frames), info.fps, info.duration_s
    )
    sizes = [output_size(info.width, info.height, short_side)]
    if text_side is not None:
        side = max(short_side, min(text_side, info.width, info.height))
        sizes.append(output_size(info.width, info.height, side))
    out = _Out(path, sizes, batch)
    hw = _nvdec.hwaccel(gpu)
    batches = _decode(
        path, fd_path(file.fileno()), p, plan, out, threads, hw, stats or DecodeStats()
    )
    return info, len(plan.targets), _closing(file, batches) if own else batches


def _closing(file: io.FileIO, batches: TextBatches) -> TextBatches:
    """``batches``, closing ``file`` once they are read (dropped unread, it closes as garbage)."""
    with file:
        yield from batches


def decode(
    path: Path, sample_fps: float, max_frames: int, short_side: int = 224, batch: int = 16
) -> Batches:
    """Yield the sampled frames in batches of up to ``batch``: uint8 (b, H, W, 3) RGB with the
    short side ``short_side``, with their (frame index shown, start_s, end_s): the frame that
    stands for each interval of ``sample_frames`` (see ``_schedule.py``), its row from its
    own time to the next sampled frame's. DecodeError (naming the file) on bad input, also
    mid-video."""
    yield from open_sampled(path, sample_fps, max_frames, short_side, batch)[2]


class _Out:
    """Sampled frames converted to RGB at the embedder's size (libswscale, one scaler kept
    for the video) and, where a text size of its own is asked for, deferred at that size;
    collected into batches."""

    def __init__(self, path: Path, sizes: list[tuple[int, int]], batch: int) -> None:
        from av.video.reformatter import VideoReformatter

        self.path, self.batch = path, batch
        self.sizes = list(dict.fromkeys(sizes))  # an equal text size is the same array
        self.scalers = [VideoReformatter() for _ in self.sizes]
        self.frames: list[np.ndarray] = []
        self.text: list[Deferred] = []
        self.spans: Spans = []

    def add(self, frame: av.VideoFrame, span: tuple[int, float, float]) -> None:
        if frame.width * frame.height > MAX_FRAME_PIXELS:  # grown past the header's
            raise fail(self.path, too_big(frame.width, frame.height))
        (width, height), *text = self.sizes
        rgb = self.scalers[0].reformat(frame, width, height, "rgb24", threads=1)
        self.frames.append(rgb.to_ndarray())
        if text:  # a size of its own for reading text: converted where it is read
            self.text.append(Deferred(frame, self.scalers[1], text[0]))
        self.spans.append(span)

    def full(self) -> bool:
        return len(self.spans) >= self.batch

    def take(self) -> tuple[np.ndarray, Spans, np.ndarray | list[Deferred]]:
        """The batch collected (up to ``batch`` frames); the rest stay. The third item is
        the frames for reading text: the same array where the sizes are equal."""
        n = min(self.batch, len(self.spans))
        frames, spans = np.stack(self.frames[:n]), self.spans[:n]
        text = self.text[:n] if len(self.sizes) > 1 else frames
        del self.frames[:n], self.text[:n], self.spans[:n]
        return frames, spans, text


def _decode(
    path: Path,
    src: str,
    p: Probe,
    plan: _schedule.Schedule,
    out: _Out,
    threads: int,
    hw: HWAccel | None,
    stats: DecodeStats,
) -> TextBatches:
    """Decode ``src`` (the file ``path`` names, probed as ``p``) as the container the probe
    found. A sampled frame that never comes out of the decoder (a corrupt packet) is shown by
    the frame decoded before it, up to ``_FAULT_TOL`` of them. Where the keyframe flags or the
    container's index prove wrong, decoding starts again from the first packet and goes
    through, the frames already handed out kept (``_schedule.Replan``)."""
    targets = plan.targets
    allowed = max(1, int(_FAULT_TOL * len(targets)))
    missed: list[int] = []
    k, before = 0, None

    def keep(frame: av.VideoFrame, shown: int) -> None:
        nonlocal k
        out.add(frame, (shown, targets[k].start_s, targets[k].end_s))
        k += 1

    def miss(instead: tuple[int, av.VideoFrame] | None) -> None:
        missed.append(targets[k].frame)
        if instead is None or len(missed) > allowed:
            raise fail(
                path,
                f"truncated or corrupt: frame {missed[0]} could not be decoded"
                + (f" ({len(missed)} sampled frames so far)" if len(missed) > 1 else ""),
            )
        keep(instead[1], plan.index_of(instead[0]))

    while True:
        try:
            with open_container(path, src, p.container, hw) as container:
                stream = container.streams[p.stream]
                if threads > 1 and hw is None:  # frame threads: each a decoded frame in flight
                    stream.thread_type, stream.thread_count = "FRAME", threads
                else:
                    stream.thread_count = 1
                for key, frame in _schedule.decoded(container, stream, plan, stats):
                    if key is None:
                        continue
                    while k < len(targets) and key > targets[k].key:
                        miss((key, frame) if before is None else before)
                    if k < len(targets) and key == targets[k].key:
                        keep(frame, targets[k].frame)
                    before = key, frame
                    while out.full():
                        yield out.take()
            break
        except _schedule.Replan:
            if not plan.trusted:
                raise
            plan = plan.through()
        except av.error.FFmpegError as e:
            raise fail(path, f"truncated or corrupt: {av_reason(e)}") from None
    while k < len(targets):
        miss(before)
    while out.spans:
        yield out.take()
