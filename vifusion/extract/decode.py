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
(one scaler per size, kept for the video), on ``threads`` codec threads.

Untrusted bytes meet one demuxer, chosen once: the probe accepts only containers that hold
their own media (``_CONTAINERS``), with FFmpeg reading nothing but files, and decoding opens
the container the probe found rather than guessing again. A playlist (HLS, DASH), an ffconcat
list or an image2 pattern would make FFmpeg read what it names: another file, another of this
process's descriptors, and index it as this video (issue 51: an HLS playlist followed by an
MPEG-TS stream passed for a video, and decord's FFmpeg 4.1 read the playlist). Why:
docs/benchmarks.md, "Design notes moved from docstrings".
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from vifusion._files import NotRegularFile, fd_path, open_regular
from vifusion.extract import _schedule
from vifusion.extract._schedule import Stats as DecodeStats

MAX_FRAME_PIXELS = 8192 * 8192  # 8K video fits; a header declaring more is refused, not decoded
# Share of the sampled frames that may be missing (a corrupt packet; one at least), each shown
# by the frame before it, before decoding fails instead: a glitch is fine for search, half a
# video of duplicates is not.
_FAULT_TOL = 0.05
# Below one frame per 100 s the rate comes from a broken header (an mp4 time scale of 0 reads
# as 1/4096 fps: 8 frames spread over 9 hours), not from a camera.
_MIN_FPS = 0.01
# The containers decoded (FFmpeg's demuxer names): each holds its own media and opens no other
# file or URL (mov's external data references stay off, FFmpeg's default). Anything else is
# refused before its header is read.
_CONTAINERS = (
    "mov",  # mp4, mov, m4v, 3gp
    "matroska",  # mkv, webm
    "mpegts",
    "avi",
    "flv",
    "ogg",
    "mpeg",  # program stream, vob
    "mpegvideo",
    "asf",  # wmv
    "gif",
    "h264",
    "hevc",
    "m4v",
    "ivf",
    "nut",
    "mxf",
    "dv",
    "rm",
)
# Still images are opened too, to be refused by name: an image pipe reads its own bytes only
# (unlike image2, which reads the files a name pattern matches).
_STILL_IMAGES = tuple(sorted(f for f in av.formats_available if f.endswith("_pipe")))
_OPEN_OPTIONS = {
    "format_whitelist": ",".join(_CONTAINERS + _STILL_IMAGES),
    "protocol_whitelist": "file",  # the descriptor's /proc path; no network, no data: URLs
}


class DecodeError(Exception):
    """A file that cannot be decoded as video; the message names the file and says why."""


@dataclass(frozen=True)
class VideoInfo:
    """What probe found: display size in square pixels (rotation metadata is ignored);
    ``duration_s`` is ``num_frames / fps``."""

    duration_s: float
    fps: float
    width: int
    height: int
    num_frames: int


@dataclass(frozen=True)
class _Probe:
    info: VideoInfo
    container: str  # the demuxer decoding opens: the one the probe found
    stream: int  # the video stream's index
    index: _schedule.StreamIndex


def _fail(path: Path, why: str) -> DecodeError:
    return DecodeError(f"{path.name}: {why}")


def _av_reason(e: Exception) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def _open(path: Path, follow_symlinks: bool = True) -> io.FileIO:
    """The file, opened once (``open_regular``); FFmpeg is never handed anything but a
    non-empty regular file. Closed when garbage, so a lazy decoder never started leaks nothing."""
    try:
        fd = open_regular(path, follow_symlinks=follow_symlinks)
    except FileNotFoundError:
        raise _fail(path, "no such file") from None
    except NotRegularFile as e:
        raise _fail(path, e.strerror) from None
    except OSError as e:
        raise _fail(path, f"cannot open: {e.strerror}") from None
    file = io.FileIO(fd, "rb")
    if os.fstat(fd).st_size == 0:
        file.close()
        raise _fail(path, "empty file")
    return file


def open_container(
    path: Path, src: str, container: str | None = None
) -> av.container.InputContainer:
    """``src`` (the file ``path`` names, for errors) opened with PyAV as ``container`` (None:
    the one FFmpeg finds, if it is one of ``_CONTAINERS``), reading that file only;
    DecodeError otherwise. Whatever opens an untrusted file with PyAV opens it here."""
    try:
        return av.open(src, format=container, options=_OPEN_OPTIONS)
    except av.error.ArgumentError:  # FFmpeg's answer to a container off the list
        raise _fail(
            path,
            "not a video (a container not decoded here: a playlist or list that refers to "
            "other files, or another format that is not video)",
        ) from None
    except av.error.EOFError as e:
        raise _fail(path, f"truncated or corrupt: {_av_reason(e)}") from None
    except av.error.InvalidDataError as e:
        raise _fail(path, f"not a video or corrupt: {_av_reason(e)}") from None
    except (av.error.FFmpegError, OSError) as e:
        raise _fail(path, f"cannot open: {_av_reason(e)}") from None


def _video_stream(container: av.container.InputContainer) -> av.VideoStream | None:
    for s in container.streams.video:
        if not s.disposition & av.stream.Disposition.attached_pic:
            return s
    return None


def _scan(path: Path, src: str) -> _Probe:
    """Open ``src`` (the file ``path`` names) with PyAV, check there is a real video stream
    in an allowed container, index its packets."""
    with open_container(path, src) as container:
        stream = _video_stream(container)
        if stream is None:
            raise _fail(path, "not a video (no video stream)")
        fmt = container.format.name
        if fmt.endswith("_pipe"):
            raise _fail(path, f"not a video (a still image, {fmt})")
        rate = stream.average_rate or stream.guessed_rate or stream.base_rate
        fps = float(rate) if rate else 0.0
        if not math.isfinite(fps) or fps < _MIN_FPS:
            raise _fail(path, f"not a video (frame rate {fps:.3g}/s; a broken header?)")
        width, height = stream.codec_context.width, stream.codec_context.height
        if width <= 0 or height <= 0:
            raise _fail(path, f"not a video (frame size {width}x{height})")
        if width * height > MAX_FRAME_PIXELS:  # each decoded frame would take gigabytes
            raise _fail(path, _too_big(width, height))
        sar = stream.sample_aspect_ratio or stream.codec_context.sample_aspect_ratio
        if sar and sar > 0 and sar != 1:
            width = max(1, round(width * Fraction(sar)))
        declared, stream_index = stream.frames, stream.index
        demuxer = fmt.split(",")[0]  # "mov,mp4,m4a,3gp,3g2,mj2": FFmpeg finds it as "mov"
        packets = _schedule.IndexBuilder(demuxer, stream.time_base)
        try:
            # Demux only (no decode): reads the file once, costs little next to decoding it.
            for packet in container.demux(stream):
                if packet.size:
                    packets.add(packet)
        except av.error.FFmpegError as e:
            raise _fail(
                path, f"truncated or corrupt: {_av_reason(e)} after {len(packets)} frames"
            ) from None
    n = len(packets)
    if n == 0:
        raise _fail(path, "not a video (no frames)")
    if declared and n < declared:
        raise _fail(path, f"truncated or corrupt: header lists {declared} frames, file holds {n}")
    info = VideoInfo(duration_s=n / fps, fps=fps, width=width, height=height, num_frames=n)
    return _Probe(info, demuxer, stream_index, packets.build())


def _too_big(width: int, height: int) -> str:
    return f"frame size {width}x{height} is over the limit of {MAX_FRAME_PIXELS} pixels (8192x8192)"


def _probe(path: Path, file: io.FileIO | None = None) -> _Probe:
    """Probe ``file`` (opened from ``path`` here when not given)."""
    path = Path(path)
    if file is None:
        with _open(path) as file:
            return _probe(path, file)
    return _scan(path, fd_path(file.fileno()))


def probe(path: Path) -> VideoInfo:
    """Duration, frame rate, display size and frame count of a video file. Reads the whole
    file once (packets, no decoding); DecodeError if it is missing, empty, not a video,
    truncated or corrupt."""
    return _probe(Path(path)).info


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
TextBatches = Iterator[tuple[np.ndarray, Spans, np.ndarray]]


def open_video(path: Path, follow_symlinks: bool = True) -> io.FileIO:
    """``path`` opened once, for ``open_sampled(file=...)`` and whatever else reads the same
    video (its audio, through ``fd_path``); DecodeError where it is no file to decode."""
    return _open(Path(path), follow_symlinks)


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
    stats: DecodeStats | None = None,
) -> tuple[VideoInfo, int, Batches]:
    """Probe once, then decode lazily: (info, number of sampled frames, the batches that
    ``decode`` yields). DecodeError here for a file that cannot be opened at all.
    ``follow_symlinks``: False for a path stored resolved (see ``open_regular``). ``file``:
    the video already opened (``open_video``), left open; None: opened here, closed once
    read. ``threads``: the codec's threads. ``stats``: counts what decoding cost."""
    info, total, batches = _open_sampled(
        path, sample_fps, max_frames, short_side, None, batch, follow_symlinks, file, threads, stats
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
) -> tuple[VideoInfo, int, TextBatches]:
    """``open_sampled``, each batch also holding its frames for reading text: short side
    ``text_side``, or the video's own where that lies between ``short_side`` and it (never
    upscaled past the video's own size, never below the embedder's). Both sizes come from the
    one decoded frame; where they are equal, both are the one array."""
    return _open_sampled(
        path, sample_fps, max_frames, short_side, text_side, batch, True, file, threads, None
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
    stats: DecodeStats | None,
) -> tuple[VideoInfo, int, TextBatches]:
    path = Path(path)
    if batch < 1 or short_side < 1 or threads < 1:
        raise ValueError(
            f"batch, short_side and threads must be >= 1, got {batch}, {short_side}, {threads}"
        )
    own = file is None
    if file is None:
        file = _open(path, follow_symlinks)
    try:
        p = _probe(path, file)
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
    batches = _decode(path, fd_path(file.fileno()), p, plan, out, threads, stats or DecodeStats())
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
    """Sampled frames converted to RGB at each size (libswscale, one scaler per size kept for
    the video), collected into batches."""

    def __init__(self, path: Path, sizes: list[tuple[int, int]], batch: int) -> None:
        from av.video.reformatter import VideoReformatter

        self.path, self.batch = path, batch
        self.sizes = list(dict.fromkeys(sizes))  # an equal text size is the same array
        self.scalers = [VideoReformatter() for _ in self.sizes]
        self.which = [self.sizes.index(size) for size in sizes]
        self.frames: list[list[np.ndarray]] = [[] for _ in self.sizes]
        self.spans: Spans = []

    def add(self, frame: av.VideoFrame, span: tuple[int, float, float]) -> None:
        if frame.width * frame.height > MAX_FRAME_PIXELS:  # grown past the header's
            raise _fail(self.path, _too_big(frame.width, frame.height))
        for (width, height), scaler, frames in zip(self.sizes, self.scalers, self.frames):
            rgb = scaler.reformat(frame, width, height, "rgb24", threads=1)
            frames.append(rgb.to_ndarray())
        self.spans.append(span)

    def full(self) -> bool:
        return len(self.spans) >= self.batch

    def take(self) -> tuple[np.ndarray, Spans, np.ndarray]:
        """The batch collected (up to ``batch`` frames); the rest stay."""
        n = min(self.batch, len(self.spans))
        stacks = [np.stack(frames[:n]) for frames in self.frames]
        spans = self.spans[:n]
        for frames in self.frames:
            del frames[:n]
        del self.spans[:n]
        return stacks[self.which[0]], spans, stacks[self.which[-1]]


def _decode(
    path: Path,
    src: str,
    p: _Probe,
    plan: _schedule.Schedule,
    out: _Out,
    threads: int,
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
            raise _fail(
                path,
                f"truncated or corrupt: frame {missed[0]} could not be decoded"
                + (f" ({len(missed)} sampled frames so far)" if len(missed) > 1 else ""),
            )
        keep(instead[1], plan.index_of(instead[0]))

    while True:
        try:
            with open_container(path, src, p.container) as container:
                stream = container.streams[p.stream]
                if threads > 1:  # frame threads: each a decoded frame in flight
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
            raise _fail(path, f"truncated or corrupt: {_av_reason(e)}") from None
    while k < len(targets):
        miss(before)
    while out.spans:
        yield out.take()
