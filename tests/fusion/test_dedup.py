import numpy as np
import pytest

from tests.fusion._frames import frames, join, rows, unit
from vifusion.fusion import TemporalDedup
from vifusion.types import FRAME_BITS, VISUAL_DIM, FusedBatch, video_of


def near(batch, frame_no: int, noise: float, seed: int):
    """A frame of the same video that looks almost like ``batch``'s only row."""
    rng = np.random.default_rng(seed)
    v, s = batch.space("visual")[0], batch.space("semantic")[0]
    return rows(
        int(video_of(batch.ids[0])),
        unit(v + noise * rng.standard_normal(v.shape) / np.sqrt(v.size))[None],
        unit(s + noise * rng.standard_normal(s.shape) / np.sqrt(s.size))[None],
        frame_no,
    )


def frame_nos(batch) -> list[int]:
    return [int(i) & ((1 << FRAME_BITS) - 1) for i in batch.ids]


def test_near_duplicates_merge_into_one_vector_with_the_whole_time_range():
    ab = frames(3, 2)
    a = ab.rows(slice(0, 1))
    b = rows(3, ab.space("visual")[1:], ab.space("semantic")[1:], start=4)
    stream = join(a, near(a, 1, 0.05, 1), near(a, 2, 0.05, 2), near(a, 3, 0.05, 3), b)
    d = TemporalDedup(0.98)
    out = d.push(stream)
    assert len(out) == 1  # the run a..3 closed when b came; b's run is still open
    assert (frame_nos(out), out.times.tolist()) == ([0], [[0.0, 4.0]])
    # the mean of the run, re-normalised: a unit vector close to every member
    for space in ("visual", "semantic"):
        assert abs(np.linalg.norm(out.space(space)[0]) - 1) < 1e-5
    assert (stream.space("visual")[:4] @ out.space("visual")[0] > 0.99).all()
    closed = d.close(3)
    assert (frame_nos(closed), closed.times.tolist()) == ([4], [[4.0, 5.0]])
    assert np.array_equal(closed.features, b.features)  # a run of one is the frame itself
    assert (d.frames_in, d.frames_out) == (5, 2)


@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_runs_are_the_same_however_the_stream_is_cut(chunk):
    """Runs span hand-overs: the rows a run gets do not depend on how they were batched."""
    base = frames(4, 6)
    stream = join(*[near(base.rows(slice(i // 7, i // 7 + 1)), i, 0.05, i) for i in range(42)])
    d = TemporalDedup(0.98)
    out = join(
        *[d.push(stream.rows(slice(i, i + chunk))) for i in range(0, len(stream), chunk)],
        d.close(4),
    )
    assert frame_nos(out) == [0, 7, 14, 21, 28, 35]
    assert out.times[:, 0].tolist() == [0, 7, 14, 21, 28, 35] and out.times[:, 1].tolist() == [
        7,
        14,
        21,
        28,
        35,
        42,
    ]
    expect = stream.features[:7, :VISUAL_DIM].sum(0)
    assert np.allclose(out.features[0, :VISUAL_DIM], expect / np.linalg.norm(expect), atol=1e-6)


def test_different_frames_and_other_videos_never_merge():
    d = TemporalDedup(0.98)
    v1, v2 = frames(1, 4), frames(2, 4)
    interleaved = join(*[b.rows(slice(i, i + 1)) for i in range(4) for b in (v1, v2)])
    out = join(d.push(interleaved), d.close(1), d.close(2))
    assert sorted(zip(video_of(out.ids).tolist(), frame_nos(out), strict=True)) == [
        (v, i) for v in (1, 2) for i in range(4)
    ]
    assert np.array_equal(
        out.features[np.argsort(out.ids)], join(v1, v2).features
    )  # exact, as they came


def test_compares_with_the_anchor_so_a_slow_pan_does_not_merge_forever():
    rng = np.random.default_rng(0)
    start, end = unit(rng.standard_normal(1280)), unit(rng.standard_normal(1280))
    sem = unit(rng.standard_normal(384))
    # each step is very close to the previous one, the last far from the first
    pan = rows(
        9,
        np.stack([unit((1 - i / 19) * start + i / 19 * end) for i in range(20)]),
        np.tile(sem, (20, 1)),
    )
    out = TemporalDedup(0.98).push(pan)
    assert len(out) >= 3


def test_threshold_above_one_is_off():
    f = frames(5, 1)
    d = TemporalDedup(1.01)
    twice = join(f, rows(5, f.space("visual"), f.space("semantic"), start=1))
    out = join(d.push(twice), d.close(5))
    assert frame_nos(out) == [0, 1]


def test_expire_closes_old_runs_only():
    d = TemporalDedup(0.98)
    d.push(frames(1, 1), now=0.0)
    d.push(frames(2, 1), now=1.0)
    assert d.oldest() == 0.0
    assert video_of(d.expire(before=0.5).ids).tolist() == [1]
    assert d.oldest() == 1.0
    d.drop(2)
    assert d.oldest() is None and len(d.close(2)) == 0


def test_text_rows_pass_at_once_exact_and_never_break_a_run_of_frames():
    """A speech segment said twice, or the same slide text on two spans, are two rows: text
    rows never merge, never wait in a run, and a still scene's run goes on around them."""
    still = frames(5, 1)
    said = unit(np.random.default_rng(1).standard_normal(384))
    twice = FusedBatch.of_texts(5, "speech", 0, [[0, 2], [2, 4]], np.stack([said, said]))
    on_screen = FusedBatch.of_texts(5, "screen", 0, [[1, 3]], said[None])
    d = TemporalDedup(0.98)
    out = d.push(join(still, near(still, 1, 0.05, 1), twice, near(still, 2, 0.05, 2), on_screen))
    assert sorted(out.ids.tolist()) == sorted([*twice.ids.tolist(), *on_screen.ids.tolist()])
    texts = out.rows(np.argsort(out.ids))
    assert np.array_equal(texts.features, join(twice, on_screen).features)
    assert np.array_equal(texts.times, join(twice, on_screen).times)
    closed = d.close(5)  # one run of the three frames, around the text rows
    assert (frame_nos(closed), closed.times.tolist()) == ([0], [[0.0, 3.0]])
    assert (d.frames_in, d.frames_out) == (6, 4)
