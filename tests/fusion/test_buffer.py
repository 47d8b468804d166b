import numpy as np

from tests.fusion._frames import frames
from vifusion.fusion import FRAME_BYTES, FlushPlan, FusionBuffer
from vifusion.types import video_of


def test_due_when_size_reached_and_keeps_every_frame_in_order():
    buf = FusionBuffer()
    plan = FlushPlan(max_bytes=10 * FRAME_BYTES, max_age_s=60, window=2)
    src = frames(7, 10)
    buf.add(src.rows(slice(0, 9)), arrived=0.0, extracted=100.0)
    assert not buf.due(plan, now=0.0)
    buf.add(src.rows(slice(9, None)), arrived=0.0, extracted=101.0)
    assert buf.due(plan, now=0.0)
    taken = buf.take(plan.max_bytes)
    assert len(buf) == 0 and buf.take(plan.max_bytes) is None
    batch = taken.batch
    assert batch.features.flags["C_CONTIGUOUS"] and batch.features.dtype == np.float32
    assert list(video_of(batch.ids)) == [7] * 10
    assert np.array_equal(batch.features, src.features)
    assert np.array_equal(batch.times[:, 0], np.arange(10, dtype=np.float32))
    assert taken.extracted.tolist() == [100.0] * 9 + [101.0]


def test_due_when_oldest_frame_is_old_enough():
    buf = FusionBuffer()
    plan = FlushPlan(max_bytes=1 << 30, max_age_s=0.5, window=2)
    buf.add(frames(1, 1), arrived=0.0, extracted=0.0)
    buf.add(frames(1, 1, start=1), arrived=0.4, extracted=0.0)
    assert not buf.due(plan, now=0.4)
    assert buf.due(plan, now=0.5)  # age counts from the oldest frame, not the newest


def test_due_at_once_while_nothing_is_in_flight():
    buf = FusionBuffer()
    plan = FlushPlan(max_bytes=1 << 30, max_age_s=60, window=2)
    assert not buf.due(plan, now=0.0, link_idle=True)  # nothing to send
    buf.add(frames(1, 1), arrived=0.0, extracted=0.0)
    assert not buf.due(plan, now=0.0)  # a busy link: it waits for a batch or its age
    assert buf.due(plan, now=0.0, link_idle=True)  # an idle link: waiting would only leave it idle


def test_take_is_bounded_by_bytes_oldest_first():
    buf = FusionBuffer()
    buf.add(frames(1, 5), arrived=0.0, extracted=0.0)
    first = buf.take(2 * FRAME_BYTES)
    assert [int(i) & 0xFF for i in first.batch.ids] == [0, 1]
    assert len(buf) == 3
    assert len(buf.take(1).batch) == 1  # at least one row, however small the budget
    assert [int(i) & 0xFF for i in buf.take(1 << 30).batch.ids] == [
        3,
        4,
    ]  # the cut chunk's rest, in order


def test_drop_removes_only_that_video():
    buf = FusionBuffer()
    buf.add(frames(1, 3), arrived=0.0, extracted=0.0)
    buf.add(frames(2, 2), arrived=0.0, extracted=0.0)
    assert buf.drop(1) == 3
    assert list(video_of(buf.take(1 << 30).batch.ids)) == [2, 2]


def test_batch_ids_are_unique():
    buf = FusionBuffer()
    ids = set()
    for _ in range(5):
        buf.add(frames(1, 1), arrived=0.0, extracted=0.0)
        ids.add(buf.take(1 << 30).batch.batch_id)
    assert len(ids) == 5
