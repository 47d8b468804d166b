"""Which packets to decode for the sampled frames, from the demux pass's index of the stream.

A frame needs the packets from the last keyframe before it (in decode order, and shown no
later than it) up to its own. So per sampled frame (a *target*):

- packets outside every target's span are never sent to the decoder, and at each such gap
  the decoder is drained and reset; this only where the container's keyframe flags come
  from its index as the encoder wrote it (``_INDEXED``); elsewhere every packet is sent;
- inside a span, a frame no other frame refers to is skipped unless it is a target
  (``skip_frame = "NONREF"``: 41% of the frames x264 writes at ``veryfast``);
- where keyframes can be trusted and one lies inside a sample's interval, the keyframe
  nearest the middle stands for the sample: it decodes alone.

Targets are found again among the decoded frames by their timestamp (pts); a stream whose
packets lack distinct timestamps (raw H.264) is decoded whole and its frames counted.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Iterator
from dataclasses import dataclass

import av
import numpy as np

# Containers whose keyframe flags come from an index the muxer wrote from the encoder's own
# flags (mp4 stss, Matroska/WebM block flags, FLV tag headers). Elsewhere (MPEG-TS, MPEG-PS:
# guessed by a parser; AVI, whose old encoders flag frames loosely) a wrong flag would make
# the frames after a gap garbage, so every packet up to the last sample is decoded.
_INDEXED = ("mov", "matroska", "flv")
# Per packet: not sent; sent, its frame skipped if no other refers to it; sent and decoded.
_SKIP, _REFS, _TARGET = 0, 1, 2


@dataclass(frozen=True)
class StreamIndex:
    """One video stream's packets (those holding data) in decode order, from the demux pass."""

    pts: array  # int64 per packet (0 where missing; then ``timed`` is False)
    key: bytearray  # 1 per keyframe packet
    timed: bool  # every packet has a timestamp, all distinct: frames can be found by pts
    indexed: bool  # keyframe flags can be trusted to start decoding at (``_INDEXED``)


class IndexBuilder:
    """Collects a ``StreamIndex`` while the demux pass reads the packets."""

    def __init__(self, format_name: str) -> None:
        self.pts, self.key, self.timed = array("q"), bytearray(), True
        self.indexed = format_name in _INDEXED

    def add(self, packet: av.Packet) -> None:
        if packet.pts is None:
            self.timed = False
        self.pts.append(packet.pts or 0)
        self.key.append(1 if packet.is_keyframe else 0)

    def __len__(self) -> int:
        return len(self.pts)

    def build(self) -> StreamIndex:
        timed = self.timed and len(set(self.pts)) == len(self.pts)
        return StreamIndex(self.pts, self.key, timed, self.indexed)


@dataclass(frozen=True)
class Plan:
    """``targets``: per sample, (key to match a decoded frame by, frame index shown) in
    display order; the key is the pts, or the frame's count where frames are counted.
    ``feed``: per packet in decode order, _SKIP / _REFS / _TARGET; None: every packet whole,
    frames counted."""

    targets: list[tuple[int, int]]
    feed: np.ndarray | None
    shown_pts: np.ndarray | None = None  # the packets' pts in display order (with ``feed``)

    @property
    def by_pts(self) -> bool:
        return self.feed is not None

    def index_of(self, key: int) -> int:
        """The frame index (display order) of the decoded frame with this key."""
        return key if self.shown_pts is None else int(np.searchsorted(self.shown_pts, key))


def plan(index: StreamIndex, samples: list[tuple[int, float, float]], fps: float) -> Plan:
    """The frames to decode for ``samples`` (``sample_frames``) and the packets they need."""
    if not index.timed:
        return Plan([(i, i) for i, _, _ in samples], None)
    pts = np.frombuffer(index.pts, dtype=np.int64)
    order = np.argsort(pts, kind="stable")  # frame index (display order) -> packet position
    keys = np.flatnonzero(np.frombuffer(index.key, dtype=np.uint8)) if index.indexed else None
    shown_keys = np.sort(np.argsort(order)[keys]).tolist() if keys is not None else []
    key_positions = keys.tolist() if keys is not None else []
    spans = np.zeros(len(pts) + 1, dtype=np.int64)  # +1 where a span starts, -1 past its end
    targets: list[tuple[int, int]] = []
    for i, t0, t1 in samples:
        frame = _keyframe_inside(shown_keys, t0, t1, fps, i) if shown_keys else i
        at = int(order[frame])
        spans[_start(at, key_positions, pts) if keys is not None else 0] += 1
        spans[at + 1] -= 1
        targets.append((int(pts[at]), frame))
    feed = np.where(np.cumsum(spans[:-1]) > 0, _REFS, _SKIP).astype(np.int8)
    feed[[int(order[frame]) for _, frame in targets]] = _TARGET
    return Plan(targets, feed, pts[order])


def _keyframe_inside(shown_keys: list[int], t0: float, t1: float, fps: float, middle: int) -> int:
    """The keyframe nearest ``middle`` among those shown in [t0, t1), else ``middle``."""
    lo = bisect.bisect_left(shown_keys, math.ceil(t0 * fps - 1e-6))
    hi = bisect.bisect_left(shown_keys, math.ceil(t1 * fps - 1e-6))
    inside = shown_keys[lo:hi]
    return min(inside, key=lambda k: abs(k - middle)) if inside else middle


def _start(at: int, key_positions: list[int], pts: np.ndarray) -> int:
    """Where decoding must start for the packet at ``at``: the last keyframe packet at or
    before it that is shown no later (an open GOP's leading frames need the GOP before)."""
    k = bisect.bisect_right(key_positions, at) - 1
    while k >= 0 and pts[key_positions[k]] > pts[at]:
        k -= 1
    return key_positions[k] if k >= 0 else 0


def decoded(
    container: av.container.InputContainer, stream: av.VideoStream, p: Plan
) -> Iterator[tuple[int | None, av.VideoFrame]]:
    """(key, frame) for the frames the plan has decoded, in display order, the key as
    ``Plan.targets`` has it; stops once the last target is out. A packet the decoder calls
    invalid is passed over: its frame is missing, which the caller counts if it was sampled."""
    if not p.targets:
        return
    last, shown = p.targets[-1][0], 0
    for frames in _decode(container, stream, p.feed):
        for frame in frames:
            key = frame.pts if p.by_pts else shown
            shown += 1
            yield key, frame
            if key is not None and key >= last:
                return


def _decode(
    container: av.container.InputContainer, stream: av.VideoStream, feed: np.ndarray | None
) -> Iterator[list[av.VideoFrame]]:
    """What the decoder gives for each packet ``feed`` sends it, then for the end of stream."""
    cc = stream.codec_context
    end = int(np.flatnonzero(feed)[-1]) if feed is not None else None  # the last packet sent
    at, sent, gap = -1, False, False
    for packet in container.demux(stream):
        if not packet.size:
            continue
        at += 1
        if feed is not None:
            if at > end:
                break  # every target's packets are in: drain
            if feed[at] == _SKIP:
                gap = True
                continue
            if gap and sent:  # frames held back for reordering come out before the jump
                yield cc.decode(None)
                cc.flush_buffers()
            gap = False
            skip = "DEFAULT" if feed[at] == _TARGET else "NONREF"
            if cc.skip_frame != skip:
                cc.skip_frame = skip
        sent = True
        try:
            yield cc.decode(packet)
        except av.error.InvalidDataError:
            continue
    yield cc.decode(None)
