"""What a file is: opened once as a container that holds its own media, and probed
(packets read, nothing decoded) for its video stream, size, rate and keyframes.

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
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
from av.codec.hwaccel import HWAccel

from vifusion._files import NotRegularFile, fd_path, open_regular
from vifusion.extract import _schedule

MAX_FRAME_PIXELS = 8192 * 8192  # 8K video fits; a header declaring more is refused, not decoded
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
class Probe:
    info: VideoInfo
    container: str  # the demuxer decoding opens: the one the probe found
    stream: int  # the video stream's index
    index: _schedule.StreamIndex


def fail(path: Path, why: str) -> DecodeError:
    return DecodeError(f"{path.name}: {why}")


def av_reason(e: Exception) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def _open(path: Path, follow_symlinks: bool = True) -> io.FileIO:
    """The file, opened once (``open_regular``); FFmpeg is never handed anything but a
    non-empty regular file. Closed when garbage, so a lazy decoder never started leaks nothing."""
    try:
        fd = open_regular(path, follow_symlinks=follow_symlinks)
    except FileNotFoundError:
        raise fail(path, "no such file") from None
    except NotRegularFile as e:
        raise fail(path, e.strerror) from None
    except OSError as e:
        raise fail(path, f"cannot open: {e.strerror}") from None
    file = io.FileIO(fd, "rb")
    if os.fstat(fd).st_size == 0:
        file.close()
        raise fail(path, "empty file")
    return file


def open_container(
    path: Path, src: str, container: str | None = None, hwaccel: HWAccel | None = None
) -> av.container.InputContainer:
    """``src`` (the file ``path`` names, for errors) opened with PyAV as ``container`` (None:
    the one FFmpeg finds, if it is one of ``_CONTAINERS``), reading that file only;
    DecodeError otherwise. Whatever opens an untrusted file with PyAV opens it here.
    ``hwaccel``: decode on that device (``_nvdec.hwaccel``)."""
    try:
        return av.open(src, format=container, options=_OPEN_OPTIONS, hwaccel=hwaccel)
    except av.error.ArgumentError:  # FFmpeg's answer to a container off the list
        raise fail(
            path,
            "not a video (a container not decoded here: a playlist or list that refers to "
            "other files, or another format that is not video)",
        ) from None
    except av.error.EOFError as e:
        raise fail(path, f"truncated or corrupt: {av_reason(e)}") from None
    except av.error.InvalidDataError as e:
        raise fail(path, f"not a video or corrupt: {av_reason(e)}") from None
    except (av.error.FFmpegError, OSError) as e:
        raise fail(path, f"cannot open: {av_reason(e)}") from None


def _video_stream(container: av.container.InputContainer) -> av.VideoStream | None:
    for s in container.streams.video:
        if not s.disposition & av.stream.Disposition.attached_pic:
            return s
    return None


def _scan(path: Path, src: str) -> Probe:
    """Open ``src`` (the file ``path`` names) with PyAV, check there is a real video stream
    in an allowed container, index its packets."""
    with open_container(path, src) as container:
        stream = _video_stream(container)
        if stream is None:
            raise fail(path, "not a video (no video stream)")
        fmt = container.format.name
        if fmt.endswith("_pipe"):
            raise fail(path, f"not a video (a still image, {fmt})")
        rate = stream.average_rate or stream.guessed_rate or stream.base_rate
        fps = float(rate) if rate else 0.0
        if not math.isfinite(fps) or fps < _MIN_FPS:
            raise fail(path, f"not a video (frame rate {fps:.3g}/s; a broken header?)")
        width, height = stream.codec_context.width, stream.codec_context.height
        if width <= 0 or height <= 0:
            raise fail(path, f"not a video (frame size {width}x{height})")
        if width * height > MAX_FRAME_PIXELS:  # each decoded frame would take gigabytes
            raise fail(path, too_big(width, height))
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
            raise fail(
                path, f"truncated or corrupt: {av_reason(e)} after {len(packets)} frames"
            ) from None
    n = len(packets)
    if n == 0:
        raise fail(path, "not a video (no frames)")
    if declared and n < declared:
        raise fail(path, f"truncated or corrupt: header lists {declared} frames, file holds {n}")
    info = VideoInfo(duration_s=n / fps, fps=fps, width=width, height=height, num_frames=n)
    return Probe(info, demuxer, stream_index, packets.build())


def too_big(width: int, height: int) -> str:
    return f"frame size {width}x{height} is over the limit of {MAX_FRAME_PIXELS} pixels (8192x8192)"


def probe_file(path: Path, file: io.FileIO | None = None) -> Probe:
    """Probe ``file`` (opened from ``path`` here when not given)."""
    path = Path(path)
    if file is None:
        with _open(path) as file:
            return probe_file(path, file)
    return _scan(path, fd_path(file.fileno()))


def probe(path: Path) -> VideoInfo:
    """Duration, frame rate, display size and frame count of a video file. Reads the whole
    file once (packets, no decoding); DecodeError if it is missing, empty, not a video,
    truncated or corrupt."""
    return probe_file(Path(path)).info


def open_video(path: Path, follow_symlinks: bool = True) -> io.FileIO:
    """``path`` opened once, for ``open_sampled(file=...)`` and whatever else reads the same
    video (its audio, through ``fd_path``); DecodeError where it is no file to decode."""
    return _open(Path(path), follow_symlinks)
