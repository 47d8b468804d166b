"""The shard's id -> time table: upserts, deletes by video, lookups, and its size."""

from __future__ import annotations

import numpy as np
import pytest

from vifusion.index._times import TimeTable
from vifusion.types import FRAME_BITS, speech_id


def _ids(video: int, rows) -> np.ndarray:
    return np.array([(video << FRAME_BITS) | r for r in rows], np.int64)


def test_upsert_keeps_the_newest_span_and_each_id_once() -> None:
    t = TimeTable()
    t.set(_ids(3, [0, 1, 2]), [[0, 1], [1, 2], [2, 3]])
    t.set(_ids(3, [1, 5, 5]), [[9, 9], [5, 6], [7, 8]])  # replace 1; 5 twice: the last wins
    ids, spans = t.of_video(3)
    assert ids.tolist() == _ids(3, [0, 1, 2, 5]).tolist()
    assert spans.tolist() == [[0, 1], [9, 9], [2, 3], [7, 8]]
    assert len(t) == 4 and t.count(3) == 4
    t.arrays()  # merged: the same rows
    assert [a.tolist() for a in t.of_video(3)] == [ids.tolist(), spans.tolist()]
    t.set(_ids(3, [2]), [[4, 4]])  # a merged row replaced
    assert t.get(_ids(3, [2])).tolist() == [[4, 4]] and len(t) == 4
    assert t.arrays()[1].tolist() == [[0, 1], [9, 9], [4, 4], [7, 8]]


def test_rows_of_every_kind_and_video_are_found_and_deleted_by_video() -> None:
    t = TimeTable()
    speech = speech_id(7, 0)
    t.set(np.r_[_ids(7, [0, 1]), speech, _ids(2, [4])], [[0, 1], [1, 2], [0, 5], [4, 5]])
    assert t.videos() == [2, 7] and t.video_count == 2
    held, spans = t.find(np.r_[speech, _ids(2, [4, 9])])
    assert held.tolist() == [True, True, False]
    assert spans.tolist() == [[0, 5], [4, 5], [0, 0]]
    with pytest.raises(KeyError):
        t.get(_ids(2, [9]))
    assert sorted(t.pop_video(7).tolist()) == sorted(np.r_[_ids(7, [0, 1]), speech].tolist())
    assert t.videos() == [2] and len(t) == 1
    assert not len(t.pop_video(7))


def test_a_snapshots_arrays_rebuild_the_same_table() -> None:
    rng = np.random.default_rng(0)
    ids = np.concatenate([_ids(v, rng.permutation(50)) for v in (5, 1, 9)])
    times = rng.random((len(ids), 2)).astype(np.float32)
    t = TimeTable.from_arrays(ids, times)
    again = TimeTable.from_arrays(*t.arrays())
    for v in (1, 5, 9):
        assert [a.tolist() for a in again.of_video(v)] == [a.tolist() for a in t.of_video(v)]
    assert np.array_equal(t.get(ids), times)


def test_a_million_rows_take_about_sixteen_bytes_each() -> None:
    # a dict of tuples took ~170 bytes a row: at millions of frames most of a shard's memory
    t = TimeTable()
    for v in range(1000):
        t.set(_ids(v, range(1000)), np.zeros((1000, 2), np.float32))
    assert len(t) == 1_000_000
    assert t.nbytes < 17 * len(t)
    t.arrays()  # the recent rows merged in
    assert t.nbytes < 17 * len(t)
