"""Each row's time span, by video: the shard's id -> (start, end) table.

Per video, two arrays: the rows' numbers within the video (an id's low ``FRAME_BITS`` bits,
uint32), sorted, and their spans (float32 pairs): 12 bytes a row, against ~170 for a dict
of tuples, which at millions of frames a shard was most of its memory. Grouping by video
keeps a delete by video and a video's rows one lookup. Arrays are replaced, never changed
in place, so ``of_video`` hands them out without a copy.
"""

from __future__ import annotations

import sys

import numpy as np

from vifusion.types import FRAME_BITS

_LOW = (1 << FRAME_BITS) - 1
_EMPTY_IDS = np.zeros(0, np.int64)
_EMPTY_TIMES = np.zeros((0, 2), np.float32)
_PER_VIDEO = 120  # the dict entry, key and pair of one video, beside its arrays' own sizes


class TimeTable:
    """Vector id -> (t_start, t_end) for the rows of every kind a shard holds."""

    def __init__(self) -> None:
        self._videos: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # video -> (rows, spans)
        self._n = 0

    @classmethod
    def from_arrays(cls, ids: np.ndarray, times: np.ndarray) -> TimeTable:
        table = cls()
        table.set(ids, times)
        return table

    def __len__(self) -> int:
        """Rows held."""
        return self._n

    @property
    def video_count(self) -> int:
        return len(self._videos)

    @property
    def nbytes(self) -> int:
        """Resident bytes: the arrays and each video's entry."""
        return sum(
            sys.getsizeof(rows) + sys.getsizeof(spans) + _PER_VIDEO
            for rows, spans in self._videos.values()
        )

    # -- writes ------------------------------------------------------------------------

    def set(self, ids: np.ndarray, times: np.ndarray) -> None:
        """Add or replace the spans of ``ids``; a repeated id keeps its last occurrence."""
        ids = np.asarray(ids, np.int64)
        if not len(ids):
            return
        times = np.asarray(times, np.float32).reshape(-1, 2)
        order = np.argsort(ids, kind="stable")
        ids, times = ids[order], times[order]
        videos = ids >> FRAME_BITS
        starts = np.flatnonzero(np.r_[True, videos[1:] != videos[:-1]])
        for a, b in zip(starts.tolist(), [*starts[1:].tolist(), len(ids)]):
            self._set_video(int(videos[a]), (ids[a:b] & _LOW).astype(np.uint32), times[a:b])

    def _set_video(self, video: int, rows: np.ndarray, spans: np.ndarray) -> None:
        """``rows`` sorted (stably, so the last of equal rows is the newest)."""
        old_rows, old_spans = self._videos.get(video, (None, None))
        if old_rows is not None and len(old_rows) and rows[0] > old_rows[-1]:
            rows, spans = np.concatenate([old_rows, rows]), np.concatenate([old_spans, spans])
        else:
            if old_rows is not None:
                rows = np.concatenate([old_rows, rows])
                spans = np.concatenate([old_spans, spans])
                order = np.argsort(rows, kind="stable")  # old before new among equals
                rows, spans = rows[order], spans[order]
            last = np.r_[rows[1:] != rows[:-1], True]
            if not last.all():
                rows, spans = rows[last], spans[last]
        self._n += len(rows) - (0 if old_rows is None else len(old_rows))
        self._videos[video] = (rows, spans)

    def pop_video(self, video: int) -> np.ndarray:
        """Remove a video's rows; return their ids."""
        rows, _ = self._videos.pop(video, (None, None))
        if rows is None:
            return _EMPTY_IDS
        self._n -= len(rows)
        return (video << FRAME_BITS) | rows.astype(np.int64)

    # -- reads -------------------------------------------------------------------------

    def count(self, video: int) -> int:
        rows, _ = self._videos.get(video, (_EMPTY_IDS, None))
        return len(rows)

    def videos(self) -> list[int]:
        """The videos held, ascending."""
        return sorted(self._videos)

    def of_video(self, video: int) -> tuple[np.ndarray, np.ndarray]:
        """A video's ids (ascending) and spans: (n,) int64 and (n, 2) float32."""
        rows, spans = self._videos.get(video, (None, None))
        if rows is None:
            return _EMPTY_IDS, _EMPTY_TIMES
        return (video << FRAME_BITS) | rows.astype(np.int64), spans

    def ids_of(self, videos: list[int]) -> np.ndarray:
        """The ids of these videos' rows (absent videos add none)."""
        parts = [self.of_video(int(v))[0] for v in videos]
        return np.concatenate(parts) if parts else _EMPTY_IDS

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Every id and its span, by video (for a snapshot)."""
        if not self._videos:
            return _EMPTY_IDS, _EMPTY_TIMES
        ids = np.concatenate([self.of_video(v)[0] for v in self._videos])
        return ids, np.concatenate([spans for _, spans in self._videos.values()])

    def find(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each id: whether it is held, and its span ((0, 0) where not)."""
        ids = np.asarray(ids, np.int64)
        held = np.zeros(len(ids), bool)
        out = np.zeros((len(ids), 2), np.float32)
        videos = ids >> FRAME_BITS
        for video in np.unique(videos).tolist():
            rows, spans = self._videos.get(video, (None, None))
            if rows is None or not len(rows):
                continue
            mine = np.flatnonzero(videos == video)
            want = ids[mine] & _LOW
            at = np.minimum(np.searchsorted(rows, want), len(rows) - 1)
            hit = rows[at] == want
            held[mine[hit]] = True
            out[mine[hit]] = spans[at[hit]]
        return held, out

    def get(self, ids: np.ndarray) -> np.ndarray:
        """The spans of ids that must be held, (n, 2) float32."""
        held, out = self.find(ids)
        if not held.all():
            raise KeyError(f"ids with no time span: {np.asarray(ids)[~held][:5].tolist()}")
        return out
