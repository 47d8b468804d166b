"""Which frame stands for each sample, and which packets decoding it needs, from the demux
pass's index of the stream (keyframe flags and timestamps, read without decoding).

A sample is an interval ``[t0, t1)`` (``decode.sample_frames``). Any frame shown inside it is
within half an interval of its middle, and may stand for it; the cheapest one does:

- a keyframe inside it decodes alone, so where keyframes come at least as often as samples
  only keyframes are decoded (the one nearest the middle, where there are several);
- otherwise the frame that adds the fewest packets to decode: decoding starts at the last
  keyframe before it (shown no later: an open GOP's leading frames need the GOP before) or
  goes on from the previous sample's frame, and ends at it. Between such runs the decoder is
  drained and reset, and a gap of more than ``_SEEK_GAP`` packets is sought over, not read;
- inside a run, a frame no other frame refers to is skipped unless it stands for a sample
  (``skip_frame = "NONREF"``: 41% of the frames x264 writes at ``veryfast``).

A frame's time is its own timestamp, ``(pts - first pts) x time base``: its row spans from it
to the next sampled frame's (the last to the video's end). Where the keyframe flags come from
an index the muxer wrote (``_INDEXED``) they are trusted, and checked as decoding goes: a run
whose first frame out is not the keyframe it started at (an mp4 whose sync-sample table was
lost flags every frame a keyframe), or a seek that lands past where it was sent, replans the
rest as one run from the start (``Replan``). Elsewhere (MPEG-TS, MPEG-PS: flags guessed by a
parser; AVI, whose old encoders flag loosely) every packet up to the last sample is decoded.
A stream whose packets lack distinct timestamps (raw H.264) is decoded whole and its frames
counted.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from fractions import Fraction

import av
import numpy as np

# Containers whose keyframe flags come from an index the muxer wrote from the encoder's own
# flags (mp4 stss, Matroska/WebM block flags, FLV tag headers), and which seek by it.
_INDEXED = ("mov", "matroska", "flv")
# Per packet: not sent; sent, its frame skipped if no other refers to it; sent and decoded.
_SKIP, _REFS, _TARGET = 0, 1, 2
# A gap between runs longer than this (packets) is sought over; a shorter one is read and
# dropped (demuxing a packet costs microseconds, a seek and a decoder reset more).
_SEEK_GAP = 32


@dataclass(frozen=True)
class StreamIndex:
    """One video stream's packets (those holding data) in decode order, from the demux pass."""

    pts: array  # int64 per packet (0 where missing; then ``timed`` is False)
    key: bytearray  # 1 per keyframe packet
    timed: bool  # every packet has a timestamp, all distinct: frames can be found by pts
    indexed: bool  # keyframe flags can be trusted to start decoding at (``_INDEXED``)
    time_base: Fraction  # of ``pts``


class IndexBuilder:
    """Collects a ``StreamIndex`` while the demux pass reads the packets."""

    def __init__(self, format_name: str, time_base: Fraction | None) -> None:
        self.pts, self.key, self.timed = array("q"), bytearray(), time_base is not None
        self.indexed = format_name in _INDEXED
        self.time_base = time_base or Fraction(1)

    def add(self, packet: av.Packet) -> None:
        if packet.pts is None:
            self.timed = False
        self.pts.append(packet.pts or 0)
        self.key.append(1 if packet.is_keyframe else 0)

    def __len__(self) -> int:
        return len(self.pts)

    def build(self) -> StreamIndex:
        timed = self.timed and len(set(self.pts)) == len(self.pts)
        return StreamIndex(self.pts, self.key, timed, self.indexed, self.time_base)


@dataclass(frozen=True)
class Target:
    """The frame that stands for one sample: ``key`` finds it among the decoded frames (its
    pts, or its count where frames are counted); ``frame`` its index in display order; its row
    spans [start_s, end_s), ``start_s`` being its own time."""

    key: int
    frame: int
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Schedule:
    """``targets`` in display order. ``feed``: per packet in decode order, _SKIP / _REFS /
    _TARGET; None: every packet whole, frames counted. ``runs``: the decode-order position
    each run starts at. ``trusted``: the keyframe flags and index are believed, so gaps are
    sought over and each run is checked to start at its keyframe."""

    targets: list[Target]
    feed: np.ndarray | None = None
    pts: np.ndarray | None = None  # per packet in decode order (with ``feed``)
    runs: list[int] = field(default_factory=list)
    trusted: bool = False

    @property
    def by_pts(self) -> bool:
        return self.feed is not None

    def index_of(self, key: int) -> int:
        """The frame index (display order) of the decoded frame with this key."""
        if self.pts is None:
            return key
        return int(np.searchsorted(np.sort(self.pts), key))

    def through(self) -> Schedule:
        """The same targets, decoded as one run from the first packet, without seeking: for a
        stream whose keyframe flags or index proved wrong."""
        if self.feed is None:
            return self
        feed = np.full_like(self.feed, _SKIP)
        end = int(np.flatnonzero(self.feed)[-1])
        feed[: end + 1] = _REFS
        feed[self.feed == _TARGET] = _TARGET
        return replace(self, feed=feed, runs=[0], trusted=False)


class Replan(Exception):
    """Decoding found the keyframe flags or the container's index wrong; go on with
    ``Schedule.through()``."""


@dataclass
class Stats:
    """What decoding cost: frames out of the decoder, packets read, seeks."""

    decoded: int = 0
    packets: int = 0
    seeks: int = 0


def schedule(
    index: StreamIndex, samples: list[tuple[int, float, float]], fps: float, duration_s: float
) -> Schedule:
    """The frames that stand for ``samples`` (``sample_frames``: (middle frame, t0, t1)) and
    the packets they need. A sample whose interval holds no frame (variable frame rate) is
    shown by the frame on screen at its middle, or, that being the previous sample's, joins
    the previous sample's row."""
    if not index.timed:
        frames = [i for i, _, _ in samples]
        return Schedule(_targets(frames, frames, np.asarray(frames) / fps, duration_s))
    pts = np.frombuffer(index.pts, dtype=np.int64)
    order = np.argsort(pts, kind="stable")  # frame index (display order) -> packet position
    times = (pts[order] - pts[order[0]]) * float(index.time_base)
    keys = np.flatnonzero(np.frombuffer(index.key, dtype=np.uint8)) if index.indexed else None
    chosen: list[int] = []
    runs: list[list[int]] = []  # [first, last] packet position of each run
    for _, t0, t1 in samples:
        lo, hi = np.searchsorted(times, [t0 - 1e-6, t1 - 1e-6])
        if hi <= lo:
            lo = max(0, int(np.searchsorted(times, (t0 + t1) / 2 + 1e-6)) - 1)
            hi = lo + 1
        lo = max(lo, chosen[-1] + 1 if chosen else 0)
        if lo >= hi:
            continue
        cand = np.arange(lo, hi)
        at = order[cand]
        starts = _starts(at, keys, pts) if keys is not None else np.zeros_like(at)
        end = runs[-1][1] if runs else -2
        goes_on = starts <= end + 1
        extra = np.where(goes_on, np.maximum(0, at - end), at - starts + 1)
        best = int(np.lexsort((np.abs(times[cand] - (t0 + t1) / 2), extra))[0])
        chosen.append(int(cand[best]))
        if goes_on[best]:
            runs[-1][0] = min(runs[-1][0], int(starts[best]))
            runs[-1][1] = max(end, int(at[best]))
        else:
            runs.append([int(starts[best]), int(at[best])])
    feed = np.full(len(pts), _SKIP, dtype=np.int8)
    for first, last in runs:
        feed[first : last + 1] = _REFS
    feed[order[chosen]] = _TARGET
    targets = _targets([int(pts[order[j]]) for j in chosen], chosen, times[chosen], duration_s)
    return Schedule(targets, feed, pts, [first for first, _ in runs], index.indexed)


def _targets(
    keys: list[int], frames: list[int], times: np.ndarray, duration_s: float
) -> list[Target]:
    """Each frame's row: from its own time to the next one's, the last to the video's end."""
    ends = [*times[1:].tolist(), max(duration_s, float(times[-1]) if len(times) else 0.0)]
    return [
        Target(k, j, round(float(t), 6), round(float(e), 6))
        for k, j, t, e in zip(keys, frames, times, ends)
    ]


def _starts(at: np.ndarray, keys: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """Where decoding must start for the packets at ``at``: the last keyframe packet at or
    before each that is shown no later (an open GOP's leading frames need the GOP before);
    0 where there is none."""
    k = np.searchsorted(keys, at, side="right") - 1
    while True:
        late = (k >= 0) & (pts[keys[np.maximum(k, 0)]] > pts[at])
        if not late.any():
            break
        k[late] -= 1
    return np.where(k >= 0, keys[np.maximum(k, 0)], 0)


def decoded(
    container: av.container.InputContainer, stream: av.VideoStream, s: Schedule, stats: Stats
) -> Iterator[tuple[int | None, av.VideoFrame]]:
    """(key, frame) for the frames the schedule has decoded, in display order, the key as
    ``Target.key`` has it; stops once the last target is out. A packet the decoder calls
    invalid is passed over: its frame is missing, which the caller counts if it was sampled.
    ``Replan`` where the keyframe flags or the index proved wrong."""
    if not s.targets:
        return
    last, shown = s.targets[-1].key, 0
    if s.feed is None:
        frames = _whole(container, stream, stats)
    else:
        frames = _frames(container, stream, s, stats)
    for batch in frames:
        for frame in batch:
            stats.decoded += 1
            key = frame.pts if s.by_pts else shown
            shown += 1
            yield key, frame
            if key is not None and key >= last:
                return


def _whole(
    container: av.container.InputContainer, stream: av.VideoStream, stats: Stats
) -> Iterator[list[av.VideoFrame]]:
    """What the decoder gives for every packet, then for the end of stream."""
    cc = stream.codec_context
    for packet in container.demux(stream):
        if packet.size:
            stats.packets += 1
            try:
                yield cc.decode(packet)
            except av.error.InvalidDataError:
                continue
    yield cc.decode(None)


def _frames(
    container: av.container.InputContainer, stream: av.VideoStream, s: Schedule, stats: Stats
) -> Iterator[list[av.VideoFrame]]:
    """What the decoder gives for each packet ``s.feed`` sends it, run by run, then for the
    end of stream. Each run starting at a keyframe must give that keyframe first."""
    assert s.feed is not None and s.pts is not None
    cc = stream.codec_context
    feed, pts = s.feed, s.pts
    position = {p: i for i, p in enumerate(pts.tolist())}
    runs = set(s.runs)
    end = int(np.flatnonzero(feed)[-1])  # the last packet sent
    at, sent = -1, False  # the last packet read; whether the decoder holds a run's packets
    expect: int | None = None  # the pts the current run's first frame must have
    sought: int | None = None  # the run the last seek was sent to
    landing = False  # the next packet read is where that seek landed
    while at < end:
        for packet in container.demux(stream):
            if not packet.size:
                continue
            i = position.get(packet.pts, at + 1) if packet.pts is not None else at + 1
            if landing:
                landing = False
                if i > sought:
                    raise Replan(f"a seek to packet {sought} landed at {i}")
            if i <= at:
                continue  # read again after a seek that landed early
            at = i
            stats.packets += 1
            if at > end:
                break
            if feed[at] == _SKIP:
                if sent:  # a run ends: what the decoder holds back comes out (a seek drops it)
                    yield _checked(cc.decode(None), expect, at)
                    cc.flush_buffers()
                    sent, expect = False, None
                nxt = s.runs[bisect.bisect_right(s.runs, at)]
                if s.trusted and nxt - at > _SEEK_GAP and nxt != sought:
                    container.seek(int(pts[nxt]), stream=stream, backward=True)
                    stats.seeks += 1
                    sought, landing = nxt, True
                    break
                continue
            if not sent and s.trusted and at in runs and packet.is_keyframe:
                expect = int(pts[at])
            skip = "DEFAULT" if feed[at] == _TARGET else "NONREF"
            if cc.skip_frame != skip:
                cc.skip_frame = skip
            sent = True
            try:
                out = cc.decode(packet)
            except av.error.InvalidDataError:
                continue
            if out and expect is not None:
                out, expect = _checked(out, expect, at), None
            yield out
        else:
            break  # the demuxer is done
    yield _checked(cc.decode(None), expect, at)


def _checked(frames: list[av.VideoFrame], expect: int | None, at: int) -> list[av.VideoFrame]:
    """``frames``, the first of a run: it must be the keyframe the run started at."""
    if expect is not None and (not frames or frames[0].pts != expect):
        raise Replan(f"the run before packet {at} did not start at its keyframe")
    return frames
