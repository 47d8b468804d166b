import numpy as np
import pytest

from vifusion.fusion import Fuser, FusionBuffer
from vifusion.fusion.buffer import FRAME_BYTES
from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FrameFeatures, video_of


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def frames(video_id: int, n: int, start: int = 0) -> list[FrameFeatures]:
    rng = np.random.default_rng(video_id * 1000 + start)
    return [
        FrameFeatures(video_id, start + i, float(start + i), float(start + i + 1),
                      rng.standard_normal(VISUAL_DIM).astype(np.float32),
                      rng.standard_normal(SEMANTIC_DIM).astype(np.float32))
        for i in range(n)
    ]


def test_flushes_when_size_reached_and_keeps_every_frame_in_order():
    buf = FusionBuffer(max_bytes=10 * FRAME_BYTES, max_age_s=60, clock=Clock())
    src = frames(7, 10)
    buf.add(src[:9])
    assert not buf.due()
    buf.add(src[9:])
    assert buf.due()
    batch = buf.flush()
    assert len(buf) == 0 and buf.flush() is None
    assert batch.features.flags["C_CONTIGUOUS"] and batch.features.dtype == np.float32
    assert list(video_of(batch.ids)) == [7] * 10
    assert np.array_equal(batch.space("visual"), np.stack([f.visual for f in src]))
    assert np.array_equal(batch.space("semantic"), np.stack([f.semantic for f in src]))
    assert np.array_equal(batch.times[:, 0], np.arange(10, dtype=np.float32))


def test_flushes_when_oldest_frame_is_old_enough():
    clock = Clock()
    buf = FusionBuffer(max_bytes=1 << 30, max_age_s=0.5, clock=clock)
    buf.add(frames(1, 1))
    clock.t = 0.4
    buf.add(frames(1, 1, start=1))
    assert not buf.due()
    clock.t = 0.5  # age counts from the oldest frame, not the newest
    assert buf.due()


def test_fuser_keeps_destinations_apart():
    fuser = Fuser(max_bytes=3 * FRAME_BYTES, max_age_s=60, clock=Clock())
    assert fuser.add(0, frames(2, 2)) == []
    assert fuser.add(1, frames(3, 2)) == []
    out = fuser.add(0, frames(2, 1, start=2))
    assert [(d, len(b)) for d, b in out] == [(0, 3)]
    assert fuser.pending(1) == 2
    last = fuser.flush(1)
    assert list(video_of(last.ids)) == [3, 3]
    assert fuser.flush(1) is None


@pytest.mark.parametrize("n", [1, 5])
def test_batch_ids_are_unique(n):
    fuser = Fuser(max_bytes=1, max_age_s=60, clock=Clock())
    ids = {b.batch_id for _ in range(n) for _, b in fuser.add(0, frames(1, 1))}
    assert len(ids) == n
