"""Hostile video files written with PyAV (or patched from a good one), shared by the decode
tests and the service tests that upload them."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np


def huge_frame(path: Path) -> None:
    """One black 9216x9216 frame: a 250 KB file whose frames would take 127 MB each."""
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=1)
        s.width = s.height = 9216
        s.pix_fmt, s.options = "yuv420p", {"preset": "ultrafast"}
        frame = av.VideoFrame(9216, 9216, "yuv420p")
        for plane in frame.planes:
            plane.update(bytes(plane.buffer_size))
        for packet in [*s.encode(frame), *s.encode(None)]:
            c.mux(packet)


def zero_timescale(src: Path, path: Path) -> None:
    """The mp4 ``src`` with its track's time scale (mdhd) set to 0: FFmpeg reads 1/4096 fps."""
    data = bytearray(src.read_bytes())
    at = (
        data.find(b"mdhd") + 4 + 4 + 8
    )  # box type, version + flags, creation and modification times
    data[at : at + 4] = bytes(4)
    path.write_bytes(bytes(data))


def tiny_frames(path: Path, n: int, fps: int, container: str | None = None) -> None:
    """``n`` 16x16 frames at ``fps``; ``container`` overrides the one the name implies."""
    with av.open(str(path), "w", format=container) as c:
        s = c.add_stream("libx264", rate=fps)
        s.width = s.height = 16
        s.pix_fmt, s.options = "yuv420p", {"preset": "ultrafast"}
        for i in range(n):
            frame = av.VideoFrame.from_ndarray(
                np.full((16, 16, 3), i % 256, np.uint8), format="rgb24"
            )
            frame.pts = i
            for packet in s.encode(frame):
                c.mux(packet)
        for packet in s.encode(None):
            c.mux(packet)


def audio_only(path: Path, duration_s: float) -> None:
    """An AAC file (``.m4a``, say) of chords and no video stream."""
    from vifusion.samples.talks import AUDIO_RATE, music

    pcm = music(duration_s)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("aac", rate=AUDIO_RATE, layout="mono")
        for at in range(0, len(pcm), 960):
            frame = av.AudioFrame.from_ndarray(
                pcm[None, at : at + 960], format="flt", layout="mono"
            )
            frame.sample_rate, frame.pts = AUDIO_RATE, at
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
