"""Each row's time span: the shard's id -> (start, end) table.

Two sorted arrays (ids int64, spans float32 pairs: 16 bytes a row, against ~170 for a dict
of tuples, which at millions of frames a shard was most of its memory), plus the rows set
since, per video in a dict, merged in once they pass a small share of the arrays. A search's
lookup is one ``searchsorted`` over all its ids. A video's ids are one contiguous range
(``types``), so its rows and its delete are a slice. The arrays are replaced, never changed
in place, so a snapshot may write them outside the shard's lock.
"""

from __future__ import annotations

import numpy as np

from vifusion.types import FRAME_BITS

_MERGE_MIN = 4096  # recent rows merged in past this, or past 1/_MERGE_SHARE of the arrays
_MERGE_SHARE = 64
_RECENT_ROW = 170  # resident bytes of one recent row (dict entry, int key, tuple of floats)
_PER_VIDEO = 100  # a video's row count entry


class TimeTable:
    """Vector id -> (t_start, t_end) for the rows of every kind a shard holds."""

    def __init__(self) -> None:
        self._ids = np.zeros(0, np.int64)
        self._spans = np.zeros((0, 2), np.float32)
        self._recent: dict[int, dict[int, tuple[float, float]]] = {}  # video -> {id: span}
        self._recent_n = 0
        self._counts: dict[int, int] = {}  # video -> rows
        self._n = 0

    @classmethod
    def from_arrays(cls, ids: np.ndarray, times: np.ndarray) -> TimeTable:
        """A table of these rows (a repeated id keeps its last occurrence)."""
        table = cls()
        ids = np.asarray(ids, np.int64)
        times = np.asarray(times, np.float32).reshape(-1, 2)
        order = np.argsort(ids, kind="stable")
        ids, times = ids[order], times[order]
        last = np.r_[ids[1:] != ids[:-1], True] if len(ids) else np.zeros(0, bool)
        table._ids, table._spans = ids[last], np.ascontiguousarray(times[last])
        videos, counts = np.unique(table._ids >> FRAME_BITS, return_counts=True)
        table._counts = dict(zip(videos.tolist(), counts.tolist()))
        table._n = len(table._ids)
        return table

    def __len__(self) -> int:
        """Rows held."""
        return self._n

    @property
    def video_count(self) -> int:
        return len(self._counts)

    @property
    def nbytes(self) -> int:
        """Resident bytes: the arrays, the recent rows and the per-video counts."""
        return (
            self._ids.nbytes
            + self._spans.nbytes
            + _RECENT_ROW * self._recent_n
            + _PER_VIDEO * len(self._counts)
        )

    # -- writes ------------------------------------------------------------------------

    def set(self, ids: np.ndarray, times: np.ndarray) -> np.ndarray:
        """Add or replace the spans of ``ids``; a repeated id keeps its last occurrence.
        Returns which ids were held before (replaced, not added)."""
        ids = np.asarray(ids, np.int64)
        if not len(ids):
            return np.zeros(0, bool)
        times = np.asarray(times, np.float32).reshape(-1, 2)
        held, _ = self.find(ids)
        for i, span, was in zip(ids.tolist(), map(tuple, times.tolist()), held.tolist()):
            rows = self._recent.setdefault(i >> FRAME_BITS, {})
            if i not in rows:
                self._recent_n += 1
                if not was:  # a new row (a repeat within this call finds it in ``rows``)
                    self._counts[i >> FRAME_BITS] = self._counts.get(i >> FRAME_BITS, 0) + 1
                    self._n += 1
            rows[i] = span
        if self._recent_n > max(_MERGE_MIN, len(self._ids) // _MERGE_SHARE):
            self._merge()
        return held

    def pop_video(self, video: int) -> np.ndarray:
        """Remove a video's rows; return their ids."""
        n = self._counts.pop(video, 0)
        if not n:
            return np.zeros(0, np.int64)
        self._n -= n
        lo, hi = self._range(video)
        recent = self._recent.pop(video, {})
        self._recent_n -= len(recent)
        ids = self._ids[lo:hi]
        if hi > lo:
            self._ids = np.concatenate([self._ids[:lo], self._ids[hi:]])
            self._spans = np.concatenate([self._spans[:lo], self._spans[hi:]])
        fresh = np.fromiter(recent, np.int64, len(recent))
        return np.union1d(ids, fresh)

    def _merge(self) -> None:
        """Fold the recent rows into new sorted arrays (a replaced id takes its new span)."""
        if not self._recent_n:
            return
        rows = [r for by_video in self._recent.values() for r in by_video.items()]
        ids = np.fromiter((i for i, _ in rows), np.int64, len(rows))
        spans = np.array([s for _, s in rows], np.float32).reshape(-1, 2)
        order = np.argsort(ids)
        ids, spans = ids[order], spans[order]
        at = np.minimum(np.searchsorted(self._ids, ids), max(len(self._ids) - 1, 0))
        known = self._ids[at] == ids if len(self._ids) else np.zeros(len(ids), bool)
        merged = self._spans.copy() if known.any() else self._spans
        merged[at[known]] = spans[known]
        where = np.searchsorted(self._ids, ids[~known])
        self._ids = np.insert(self._ids, where, ids[~known])
        self._spans = np.insert(merged, where, spans[~known], axis=0)
        self._recent, self._recent_n = {}, 0

    # -- reads -------------------------------------------------------------------------

    def count(self, video: int) -> int:
        return self._counts.get(video, 0)

    def videos(self) -> list[int]:
        """The videos held, ascending."""
        return sorted(self._counts)

    def of_video(self, video: int) -> tuple[np.ndarray, np.ndarray]:
        """A video's ids (ascending) and spans: (n,) int64 and (n, 2) float32, copies."""
        lo, hi = self._range(video)
        ids, spans = self._ids[lo:hi], self._spans[lo:hi]
        recent = self._recent.get(video)
        if not recent:
            return ids.copy(), spans.copy()  # copies: a merge may replace the arrays
        fresh = np.fromiter(recent, np.int64, len(recent))
        fresh_spans = np.array(list(recent.values()), np.float32).reshape(-1, 2)
        old = ~np.isin(ids, fresh)
        ids = np.concatenate([ids[old], fresh])
        spans = np.concatenate([spans[old], fresh_spans])
        order = np.argsort(ids)
        return ids[order], spans[order]

    def ids_of(self, videos: list[int]) -> np.ndarray:
        """The ids of these videos' rows (absent videos add none)."""
        parts = [self.of_video(int(v))[0] for v in videos if int(v) in self._counts]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Every id and its span, ascending (for a snapshot; never changed in place)."""
        self._merge()
        return self._ids, self._spans

    def find(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each id: whether it is held, and its span ((0, 0) where not)."""
        ids = np.asarray(ids, np.int64)
        out = np.zeros((len(ids), 2), np.float32)
        held = np.zeros(len(ids), bool)
        if len(self._ids):
            at = np.minimum(np.searchsorted(self._ids, ids), len(self._ids) - 1)
            held = self._ids[at] == ids
            out[held] = self._spans[at[held]]
        if self._recent:
            recent = self._recent
            for j, i in enumerate(ids.tolist()):
                rows = recent.get(i >> FRAME_BITS)
                if rows is not None and (span := rows.get(i)) is not None:
                    held[j] = True
                    out[j] = span
        return held, out

    def get(self, ids: np.ndarray) -> np.ndarray:
        """The spans of ids that must be held, (n, 2) float32."""
        held, out = self.find(ids)
        if not held.all():
            raise KeyError(f"ids with no time span: {np.asarray(ids)[~held][:5].tolist()}")
        return out

    def _range(self, video: int) -> tuple[int, int]:
        lo, hi = np.searchsorted(self._ids, [video << FRAME_BITS, (video + 1) << FRAME_BITS])
        return int(lo), int(hi)
