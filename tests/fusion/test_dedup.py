import numpy as np

from tests.fusion._frames import frames, unit
from vifusion.fusion import TemporalDedup
from vifusion.types import FrameFeatures


def near(f: FrameFeatures, frame_no: int, noise: float, seed: int) -> FrameFeatures:
    """A frame of the same video that looks almost like ``f``."""
    rng = np.random.default_rng(seed)
    return FrameFeatures(f.video_id, frame_no, float(frame_no), float(frame_no + 1),
                         unit(f.visual + noise * rng.standard_normal(f.visual.shape) / np.sqrt(f.visual.size)),
                         unit(f.semantic + noise * rng.standard_normal(f.semantic.shape) / np.sqrt(f.semantic.size)))


def test_near_duplicates_merge_into_one_vector_with_the_whole_time_range():
    a, b = frames(3, 2)
    b = FrameFeatures(3, 4, 4.0, 5.0, b.visual, b.semantic)
    stream = [a, near(a, 1, 0.05, 1), near(a, 2, 0.05, 2), near(a, 3, 0.05, 3), b]
    d = TemporalDedup(0.98)
    out = d.push(stream)
    assert len(out) == 1  # the run a..3 closed when b came; b's run is still open
    run = out[0]
    assert (run.video_id, run.frame_no, run.t_start, run.t_end) == (3, 0, 0.0, 4.0)
    # the mean of the run, re-normalised: a unit vector close to every member
    assert abs(np.linalg.norm(run.visual) - 1) < 1e-5 and abs(np.linalg.norm(run.semantic) - 1) < 1e-5
    assert all(float(run.visual @ f.visual) > 0.99 for f in stream[:4])
    closed = d.close(3)
    assert [(f.frame_no, f.t_start, f.t_end) for f in closed] == [(4, 4.0, 5.0)]
    assert np.array_equal(closed[0].visual, b.visual)  # a run of one is the frame itself
    assert (d.frames_in, d.frames_out) == (5, 2)


def test_different_frames_and_other_videos_never_merge():
    d = TemporalDedup(0.98)
    v1, v2 = frames(1, 4), frames(2, 4)
    out = d.push([x for pair in zip(v1, v2, strict=True) for x in pair])  # interleaved videos
    out += d.close(1) + d.close(2)
    assert sorted((f.video_id, f.frame_no) for f in out) == [(v, i) for v in (1, 2) for i in range(4)]


def test_compares_with_the_anchor_so_a_slow_pan_does_not_merge_forever():
    rng = np.random.default_rng(0)
    start, end = unit(rng.standard_normal(1280)), unit(rng.standard_normal(1280))
    sem = unit(rng.standard_normal(384))
    # each step is very close to the previous one, the last far from the first
    pan = [FrameFeatures(9, i, float(i), i + 1.0, unit((1 - i / 19) * start + i / 19 * end), sem) for i in range(20)]
    out = TemporalDedup(0.98).push(pan)
    assert len(out) >= 3


def test_threshold_above_one_is_off():
    f = frames(5, 1)[0]
    d = TemporalDedup(1.01)
    out = d.push([f, FrameFeatures(5, 1, 1.0, 2.0, f.visual, f.semantic)]) + d.close(5)
    assert [x.frame_no for x in out] == [0, 1]


def test_expire_closes_old_runs_only():
    d = TemporalDedup(0.98)
    d.push(frames(1, 1), now=0.0)
    d.push(frames(2, 1), now=1.0)
    assert d.oldest() == 0.0
    assert [f.video_id for f in d.expire(before=0.5)] == [1]
    assert d.oldest() == 1.0
    d.drop(2)
    assert d.oldest() is None and d.close(2) == []
