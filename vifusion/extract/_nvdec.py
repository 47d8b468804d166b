"""Decoding on the GPU's video engine (NVDEC) through the FFmpeg that PyAV's wheel ships.

Asked for where the extractor's model runs on CUDA, so its node's cores are left to what
only they can do (scaling, the hand-over, screen text). Frames come back to host memory and
are scaled by libswscale as on the CPU path, so all that follows the decoder is the same. A
codec the engine lacks is decoded in software by the same FFmpeg. Whether a CUDA device can
be opened is asked once per process: where it cannot (no GPU, no driver's video library),
every file decodes on the CPU.
"""

from __future__ import annotations

import functools

import av
from av.codec.hwaccel import HWAccel, hwdevices_available


@functools.cache
def _usable() -> bool:
    if "cuda" not in hwdevices_available():
        return False
    try:
        HWAccel("cuda").create(av.codec.Codec("h264", "r"))
    except (av.error.FFmpegError, OSError):
        return False
    return True


def hwaccel(wanted: bool) -> HWAccel | None:
    """PyAV's settings to decode on the GPU where ``wanted`` and one can be opened here, else
    None (decode on the CPU)."""
    if not wanted or not _usable():
        return None
    return HWAccel("cuda", allow_software_fallback=True)
