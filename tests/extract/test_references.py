"""Uploads that name other files (issue 51): a playlist or a concat list in front of a real
video stream passes the upload sniff, so the decoder must never read what it names.

Real files written with PyAV: ``secret.ts`` (solid red) stands for a file outside the ingest
roots; the uploads' own frames are blue. Before the fix decord (FFmpeg 4.1) read the HLS
upload as a playlist and handed out the secret's red frames, and PyAV followed the concat
list to another descriptor the process held open.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import av
import numpy as np
import pytest

from vifusion.extract.decode import DecodeError, decode, probe
from vifusion.ingest.sources import SNIFF_BYTES, sniff

RED, BLUE = (255, 0, 0), (0, 0, 255)


def mpegts(frames: list[np.ndarray], fps: int = 24) -> bytes:
    """An MPEG-TS H.264 stream of ``frames`` (h, w, 3 RGB) at ``fps``."""
    out = io.BytesIO()
    with av.open(out, "w", format="mpegts") as c:
        s = c.add_stream("libx264", rate=fps)
        s.height, s.width = frames[0].shape[:2]
        s.pix_fmt, s.options = "yuv420p", {"preset": "ultrafast"}
        for i, rgb in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(rgb, "rgb24")
            frame.pts = i
            c.mux(s.encode(frame))
        c.mux(s.encode(None))
    return out.getvalue()


def _ts(colour: tuple[int, int, int], frames: int = 48) -> bytes:
    """``frames`` solid 64x48 frames at 24 fps."""
    return mpegts([np.full((48, 64, 3), colour, np.uint8)] * frames)


def hls_in_front(names: Path, video: bytes) -> bytes:
    """An HLS playlist naming ``names`` (as a file:// URI), then ``video``."""
    playlist = (
        "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXT-X-MEDIA-SEQUENCE:0\n"
        f"#EXTINF:2.0,\n{names.as_uri()}\n#EXT-X-ENDLIST\n"
    )
    return playlist.encode() + video


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "secret.ts"
    path.parent.mkdir()
    path.write_bytes(_ts(RED))
    return path


def _colours(path: Path) -> list[np.ndarray]:
    return [f.reshape(-1, 3).mean(0) for frames, _ in decode(path, 4.0, 3600) for f in frames]


def test_an_hls_playlist_in_front_of_a_video_shows_only_the_uploads_own_frames(
    tmp_path: Path, secret: Path
) -> None:
    upload = tmp_path / "clip.mp4"
    upload.write_bytes(hls_in_front(secret, _ts(BLUE)))
    assert sniff(upload.read_bytes()[:SNIFF_BYTES]) is None  # the service takes it as a video

    assert probe(upload).num_frames == 48
    colours = _colours(upload)
    assert len(colours) == 8
    for mean in colours:  # blue, its own: not the secret's red
        assert mean[2] > 200 and mean[0] < 60, mean


def test_a_concat_list_naming_another_open_descriptor_is_refused(
    tmp_path: Path, secret: Path
) -> None:
    """``file 7`` in an ffconcat list is ``/proc/self/fd/7`` next to the upload's own
    descriptor: whatever the extractor holds open. A NUL after a comment passes the sniff."""
    held = os.open(secret, os.O_RDONLY)
    try:
        upload = tmp_path / "list.mp4"
        upload.write_bytes(f"ffconcat version 1.0\nfile {held}\n#".encode() + b"\x00# \xff\xfe\n")
        assert sniff(upload.read_bytes()[:SNIFF_BYTES]) is None

        for call in (lambda: probe(upload), lambda: _colours(upload)):
            with pytest.raises(DecodeError) as err:
                call()
            assert "list.mp4: not a video" in str(err.value)
            assert "refers to other files" in str(err.value)
    finally:
        os.close(held)
