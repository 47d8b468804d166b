"""Video decoding and the frame-sampling policy.

``sample_frames``: intervals of ``1 / sample_fps`` seconds (at most ``max_frames`` of them,
else ``max_frames`` equal ones), each represented by the frame at its middle; frame ``i``
covers ``[i / fps, (i + 1) / fps)`` (``fps`` averaged for variable-rate video).

Decoding: decord for the sampled frames only, PyAV where decord cannot open the file. A file
is opened once (``_files.open_regular``) and both read ``fd_path`` of that descriptor, never
the name again; PyAV counts its packets first, and a file holding fewer frames than its
header promises is rejected before decord (which can hang on it) sees it. Why:
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

# decord stores frame timestamps as int32 and loops forever on streams past that (decord#269).
_DECORD_MAX_PTS = 2**31 - 1
MAX_FRAME_PIXELS = 8192 * 8192  # 8K video fits; a header declaring more is refused, not decoded
# Share of frames decord may replace by their predecessor (corrupt, "recovered") before it
# raises instead: a few glitches are fine for search, half a video of duplicates is not.
_FAULT_TOL = 0.05
# Below one frame per 100 s the rate comes from a broken header (an mp4 time scale of 0 reads
# as 1/4096 fps: 8 frames spread over 9 hours), not from a camera.
_MIN_FPS = 0.01
_STILL_IMAGE_FORMATS = ("image2", "image2pipe")  # and every "*_pipe" (png_pipe, jpeg_pipe, ...)


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
    backend: str  # "decord" or "pyav"


def _fail(path: Path, why: str) -> DecodeError:
    return DecodeError(f"{path.name}: {why}")


def _av_reason(e: Exception) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def _open(path: Path, follow_symlinks: bool = True) -> io.FileIO:
    """The file, opened once (``open_regular``); decord is never handed anything but a
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


def _scan(path: Path, src: str) -> tuple[VideoInfo, bool]:
    """Open ``src`` (the file ``path`` names) with PyAV, check there is a real video stream,
    count its packets.

    Returns (info, whether decord may be given the file)."""
    try:
        container = av.open(src)
    except av.error.EOFError as e:
        raise _fail(path, f"truncated or corrupt: {_av_reason(e)}") from None
    except av.error.InvalidDataError as e:
        raise _fail(path, f"not a video or corrupt: {_av_reason(e)}") from None
    except (av.error.FFmpegError, OSError) as e:
        raise _fail(path, f"cannot open: {_av_reason(e)}") from None
    with container:
        streams = [
            s
            for s in container.streams.video
            if not s.disposition & av.stream.Disposition.attached_pic
        ]
        if not streams:
            raise _fail(path, "not a video (no video stream)")
        fmt = container.format.name
        if fmt in _STILL_IMAGE_FORMATS or fmt.endswith("_pipe"):
            raise _fail(path, f"not a video (a still image, {fmt})")
        stream = streams[0]
        rate = stream.average_rate or stream.guessed_rate or stream.base_rate
        fps = float(rate) if rate else 0.0
        if not math.isfinite(fps) or fps < _MIN_FPS:
            raise _fail(path, f"not a video (frame rate {fps:.3g}/s; a broken header?)")
        width, height = stream.codec_context.width, stream.codec_context.height
        if width <= 0 or height <= 0:
            raise _fail(path, f"not a video (frame size {width}x{height})")
        if width * height > MAX_FRAME_PIXELS:  # each decoded frame would take gigabytes
            raise _fail(
                path,
                f"frame size {width}x{height} is over the limit of {MAX_FRAME_PIXELS} pixels (8192x8192)",
            )
        sar = stream.sample_aspect_ratio or stream.codec_context.sample_aspect_ratio
        if sar and sar > 0 and sar != 1:
            width = max(1, round(width * Fraction(sar)))
        declared = stream.frames
        packets, max_pts = 0, 0
        try:
            # Demux only (no decode): reads the file once, costs little next to decoding it.
            for packet in container.demux(stream):
                if packet.size:
                    packets += 1
                    if packet.pts is not None:
                        max_pts = max(max_pts, abs(packet.pts))
        except av.error.FFmpegError as e:
            raise _fail(
                path, f"truncated or corrupt: {_av_reason(e)} after {packets} frames"
            ) from None
    if packets == 0:
        raise _fail(path, "not a video (no frames)")
    if declared and packets < declared:
        raise _fail(
            path, f"truncated or corrupt: header lists {declared} frames, file holds {packets}"
        )
    info = VideoInfo(
        duration_s=packets / fps, fps=fps, width=width, height=height, num_frames=packets
    )
    return info, max_pts <= _DECORD_MAX_PTS


def _open_decord(src: str, width: int = -1, height: int = -1):  # -> decord.VideoReader
    import decord

    # One thread: extractors run one per core next to torch; decord's default (one per core
    # per reader) oversubscribes the machine.
    return decord.VideoReader(
        src, ctx=decord.cpu(0), width=width, height=height, num_threads=1, fault_tol=_FAULT_TOL
    )


def _probe(path: Path, file: io.FileIO | None = None) -> _Probe:
    """Probe ``file`` (opened from ``path`` here when not given)."""
    path = Path(path)
    if file is None:
        with _open(path) as file:
            return _probe(path, file)
    src = fd_path(file.fileno())
    info, decord_ok = _scan(path, src)
    if not decord_ok:
        return _Probe(info, "pyav")
    try:
        vr = _open_decord(src)
        n, fps = len(vr), float(vr.get_avg_fps())
    except Exception:  # decord raises RuntimeError, DECORDError, AssertionError; PyAV can read it
        return _Probe(info, "pyav")
    finally:
        vr = None
    if n <= 0 or not math.isfinite(fps) or fps <= 0:
        return _Probe(info, "pyav")
    # Never index past the frames the file holds: decord's count may come from the header or
    # from duration * fps, and asking for a frame that is not there can hang it (decord#373).
    n = min(n, info.num_frames)
    return _Probe(
        VideoInfo(duration_s=n / fps, fps=fps, width=info.width, height=info.height, num_frames=n),
        "decord",
    )


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


Batches = Iterator[tuple[np.ndarray, list[tuple[int, float, float]]]]


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
    min_short_side: int | None = None,
    file: io.FileIO | None = None,
) -> tuple[VideoInfo, int, Batches]:
    """Probe once, then decode lazily: (info, number of sampled frames, the batches that
    ``decode`` yields). DecodeError here for a file that cannot be opened at all.
    ``follow_symlinks``: False for a path stored resolved (see ``open_regular``).
    ``min_short_side``: the video's own short side where it lies between this and ``short_side``
    (decord cannot hand out some tiny sizes as they are: 16x16). ``file``: the
    video already opened (``open_video``), left open; None: opened here, closed once read."""
    path = Path(path)
    if batch < 1 or short_side < 1:
        raise ValueError(f"batch and short_side must be >= 1, got {batch}, {short_side}")
    own = file is None
    if file is None:
        file = _open(path, follow_symlinks)
    try:
        p = _probe(path, file)
    except BaseException:
        if own:
            file.close()
        raise
    samples = sample_frames(p.info, sample_fps, max_frames)
    side = short_side
    if min_short_side is not None:
        side = max(min_short_side, min(short_side, p.info.width, p.info.height))
    size = output_size(p.info.width, p.info.height, side)
    reader = _decode_decord if p.backend == "decord" else _decode_pyav
    batches = reader(path, samples, size, batch, fd_path(file.fileno()))
    return p.info, len(samples), _closing(file, batches) if own else batches


def _closing(file: io.FileIO, batches: Batches) -> Batches:
    """``batches``, closing ``file`` once they are read (dropped unread, it closes as garbage)."""
    with file:
        yield from batches


def decode(
    path: Path, sample_fps: float, max_frames: int, short_side: int = 224, batch: int = 16
) -> Batches:
    """Yield the sampled frames (see sample_frames) in batches of up to ``batch``: uint8
    (b, H, W, 3) RGB resized so the short side is ``short_side``, with their (frame index,
    t_start, t_end). DecodeError (naming the file) on bad input, also mid-video."""
    yield from open_sampled(path, sample_fps, max_frames, short_side, batch)[2]


def _decode_decord(
    path: Path,
    samples: list[tuple[int, float, float]],
    size: tuple[int, int],
    batch: int,
    src: str | None = None,
) -> Iterator[tuple[np.ndarray, list[tuple[int, float, float]]]]:
    """Decode ``src`` (default: ``path``, which errors name)."""
    try:
        # Resizing inside decord (its scale filter) converts each kept frame once, at the small size.
        vr = _open_decord(src or str(path), width=size[0], height=size[1])
    except Exception as e:
        raise _fail(path, f"cannot open: {_first_line(e)}") from None
    for i in range(0, len(samples), batch):
        chunk = samples[i : i + batch]
        try:
            out = vr.get_batch([s[0] for s in chunk])
        except Exception as e:
            raise _fail(
                path,
                f"truncated or corrupt: frames {chunk[0][0]}..{chunk[-1][0]}: {_first_line(e)}",
            ) from None
        frames = (
            out.asnumpy() if hasattr(out, "asnumpy") else np.asarray(out)
        )  # decord's bridge may be set
        yield frames, chunk


def _decode_pyav(
    path: Path,
    samples: list[tuple[int, float, float]],
    size: tuple[int, int],
    batch: int,
    src: str | None = None,
) -> Iterator[tuple[np.ndarray, list[tuple[int, float, float]]]]:
    """Decode ``src`` (default: ``path``, which errors name)."""
    width, height = size
    pending = list(samples)
    frames: list[np.ndarray] = []
    done: list[tuple[int, float, float]] = []
    try:
        with av.open(src or str(path)) as container:
            stream = next(
                s
                for s in container.streams.video
                if not s.disposition & av.stream.Disposition.attached_pic
            )
            stream.thread_count = 1
            # Every frame must be decoded (frames depend on earlier ones); only the kept ones
            # are converted, straight to the output size.
            for index, frame in enumerate(container.decode(stream)):
                if not pending:
                    break
                if index < pending[0][0]:
                    continue
                frames.append(frame.to_ndarray(width=width, height=height, format="rgb24"))
                done.append(pending.pop(0))
                if len(frames) == batch:
                    yield np.stack(frames), done
                    frames, done = [], []
    except av.error.FFmpegError as e:
        raise _fail(path, f"truncated or corrupt: {_av_reason(e)}") from None
    if pending:
        raise _fail(path, f"truncated or corrupt: stream ends before frame {pending[0][0]}")
    if frames:
        yield np.stack(frames), done


def _first_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__
