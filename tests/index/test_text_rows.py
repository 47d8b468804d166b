"""Speech segments and on-screen text spans in a shard: their own spaces, the frames' log,
snapshots and deletes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vifusion.config import Config
from vifusion.index.shard import SNAPSHOT, Shard
from vifusion.types import (
    FRAME,
    FRAME_BITS,
    MAX_ROWS,
    SCREEN,
    SEMANTIC_DIM,
    SPEECH,
    VISUAL_DIM,
    FusedBatch,
    kind_of,
    row_no,
    screen_id,
    speech_id,
    vector_id,
    video_id_range,
    video_of,
)

from ._helpers import assert_same_answers, make_batch, unit

CFG = Config(faiss_threads=1)
SPACES = ("visual", "semantic", "speech", "screen")


def texts(
    video_id: int, kind: str, n: int, seed: int, first: int = 0, every_s: float = 3.0
) -> FusedBatch:
    """``n`` text rows of one kind, row i spanning [i * every_s, i * every_s + 2.5)."""
    starts = (first + np.arange(n)) * every_s
    spans = np.stack([starts, starts + 2.5], axis=1)
    return FusedBatch.of_texts(
        video_id, kind, first, spans, unit(np.random.default_rng(seed), n, SEMANTIC_DIM)
    )


def test_ids_say_video_kind_and_number() -> None:
    ids = np.array([vector_id(7, 5), speech_id(7, 5), screen_id(7, 5), vector_id(8, MAX_ROWS - 1)])
    assert kind_of(ids).tolist() == [FRAME, SPEECH, SCREEN, FRAME]
    assert row_no(ids).tolist() == [5, 5, 5, MAX_ROWS - 1]
    assert video_of(ids).tolist() == [7, 7, 7, 8]
    lo, hi = video_id_range(7)
    assert all(lo <= i < hi for i in ids[:3])  # a delete by id range takes every kind
    assert vector_id(7, 5) == 7 << FRAME_BITS | 5  # frames keep the ids they always had
    assert kind_of(speech_id(3, 0)) == SPEECH and row_no(screen_id(3, 9)) == 9
    for make in (vector_id, speech_id, screen_id):
        with pytest.raises(ValueError, match="out of range"):
            make(7, MAX_ROWS)


def test_of_texts_puts_the_embedding_in_the_semantic_columns() -> None:
    b = texts(4, "speech", 3, seed=1, first=10)
    b.check()
    assert kind_of(b.ids).tolist() == [SPEECH] * 3 and row_no(b.ids).tolist() == [10, 11, 12]
    assert not b.features[:, :VISUAL_DIM].any()
    np.testing.assert_allclose(np.linalg.norm(b.space("semantic"), axis=1), 1, atol=1e-6)
    assert b.times.tolist()[0] == [30.0, 32.5]
    with pytest.raises(ValueError, match="unknown text kind"):
        FusedBatch.of_texts(4, "visual", 0, np.zeros((1, 2)), np.zeros((1, SEMANTIC_DIM)))
    with pytest.raises(ValueError, match=r"\(2, 384\)"):
        FusedBatch.of_texts(4, "screen", 0, np.zeros((2, 2)), np.zeros((2, VISUAL_DIM)))


@pytest.fixture
def shard(tmp_path: Path) -> Shard:
    """Videos 3 and 4, each with frames, speech segments and screen-text spans, all in one
    batch per video (as an aggregator may fuse them)."""
    s = Shard(0, tmp_path / "shard-0", CFG)
    for v in (3, 4):
        s.add(
            FusedBatch.concat(
                [
                    make_batch(v, 20, seed=v),
                    texts(v, "speech", 6, seed=10 + v),
                    texts(v, "screen", 4, seed=20 + v),
                ]
            )
        )
    return s


def _expect(space: str, v: int) -> FusedBatch:
    if space in ("visual", "semantic"):
        return make_batch(v, 20, seed=v)
    return texts(v, space, 6, seed=10 + v) if space == "speech" else texts(v, space, 4, seed=20 + v)


def _column(space: str) -> str:
    return "visual" if space == "visual" else "semantic"


@pytest.mark.parametrize("space", SPACES)
def test_each_space_holds_its_own_rows_and_their_times(shard: Shard, space: str) -> None:
    rows = _expect(space, 4)
    q = rows.space(_column(space))[[1, 2]]
    scores, ids, times = shard.search(space, q, 50)
    assert ids[:, 0].tolist() == rows.ids[[1, 2]].tolist()
    np.testing.assert_allclose(scores[:, 0], 1.0, atol=1e-5)
    np.testing.assert_array_equal(times[:, 0], rows.times[[1, 2]])
    want = {"visual": FRAME, "semantic": FRAME, "speech": SPEECH, "screen": SCREEN}[space]
    assert (kind_of(ids[ids >= 0]) == want).all()  # no other kind in this space
    assert (ids >= 0).sum(axis=1).tolist() == [2 * len(rows)] * 2

    _, ids, _ = shard.search(space, q, 50, videos=[4])
    assert set(ids[ids >= 0].tolist()) == set(rows.ids.tolist())
    times, vectors = shard.frames(space, 4, rows.times[1, 0], rows.times[2, 1])
    np.testing.assert_array_equal(times, rows.times[1:3])
    np.testing.assert_allclose(vectors, rows.space(_column(space))[1:3], atol=1e-6)


def test_stats_count_frames_and_each_text_space(shard: Shard) -> None:
    stats = shard.stats()
    assert stats["vectors"] == {"visual": 40, "semantic": 40, "speech": 12, "screen": 8}
    assert stats["videos"] == 2 and shard.ntotal == 40


def test_text_rows_of_a_reindexed_video_replace_the_old_ones(shard: Shard) -> None:
    again = texts(3, "speech", 6, seed=99)
    shard.add(again)
    assert shard.stats()["vectors"]["speech"] == 12
    _, ids, _ = shard.search("speech", again.space("semantic")[:1], 1)
    assert ids[0, 0] == speech_id(3, 0)
    _, ids, _ = shard.search("speech", texts(3, "speech", 6, seed=13).space("semantic")[:1], 1)
    assert ids[0, 0] != speech_id(3, 0)  # the old vector is gone


def test_deleting_a_video_removes_it_from_every_space(shard: Shard) -> None:
    assert shard.delete_video(3) == 20 + 6 + 4
    assert shard.stats()["vectors"] == {"visual": 20, "semantic": 20, "speech": 6, "screen": 4}
    for space in SPACES:
        q = _expect(space, 3).space(_column(space))
        _, ids, _ = shard.search(space, q, 40)
        assert (video_of(ids[ids >= 0]) == 4).all()
        assert shard.frames(space, 3, 0, 1e9)[0].shape == (0, 2)


def test_a_video_of_text_rows_only_is_held_and_deleted(tmp_path: Path) -> None:
    s = Shard(0, tmp_path, CFG)
    s.add(texts(9, "screen", 3, seed=1))
    assert s.video_ids() == [9] and s.ntotal == 0
    assert s.delete_video(9) == 3
    assert s.video_ids() == [] and Shard(0, tmp_path, CFG).video_ids() == []


def _same(a: Shard, b: Shard) -> None:
    """``a`` and ``b`` answer alike video 4's rows and random queries, in every space."""
    rng = np.random.default_rng(0)
    queries = {
        space: np.concatenate(
            [
                _expect(space, 4).space(_column(space))[:2],
                unit(rng, 3, VISUAL_DIM if space == "visual" else SEMANTIC_DIM),
            ]
        )
        for space in SPACES
    }
    assert_same_answers(a, b, queries)


@pytest.mark.parametrize("snapshot_first", [False, True])
def test_text_rows_survive_a_restart_from_the_log_and_from_a_snapshot(
    shard: Shard, tmp_path: Path, snapshot_first: bool
) -> None:
    if snapshot_first:
        shard.snapshot()
    shard.add(texts(5, "speech", 2, seed=5))
    shard.delete_video(3)
    back = Shard(0, tmp_path / "shard-0", CFG)  # no snapshot since the writes: a kill
    assert back.stats()["vectors"] == {"visual": 20, "semantic": 20, "speech": 8, "screen": 4}
    assert back.video_ids() == [4, 5]
    _same(shard, back)
    back.snapshot()
    _same(shard, Shard(0, tmp_path / "shard-0", CFG))


def test_a_snapshot_written_before_text_spaces_loads_with_them_empty(tmp_path: Path) -> None:
    """Format 3 (frames only) had no speech or screen space: a shard written by it starts,
    and takes text rows from then on."""
    s = Shard(0, tmp_path, CFG)
    s.add(make_batch(1, 30, seed=1))
    s.snapshot()
    with np.load(tmp_path / SNAPSHOT) as z:
        parts = {k: v for k, v in z.items() if not k.startswith(("speech", "screen"))}
    parts["format"] = np.int64(3)
    with open(tmp_path / SNAPSHOT, "wb") as f:
        np.savez(f, **parts)
    back = Shard(0, tmp_path, CFG)
    assert back.stats()["vectors"] == {"visual": 30, "semantic": 30, "speech": 0, "screen": 0}
    rows = texts(1, "speech", 3, seed=2)
    back.add(rows)
    _, ids, _ = back.search("speech", rows.space("semantic"), 1)
    assert ids[:, 0].tolist() == rows.ids.tolist()
    back.snapshot()
    assert Shard(0, tmp_path, CFG).stats()["vectors"]["speech"] == 3


def test_a_new_snapshot_missing_a_text_space_is_refused(tmp_path: Path) -> None:
    Shard(0, tmp_path, CFG).snapshot()
    with np.load(tmp_path / SNAPSHOT) as z:
        parts = {k: v for k, v in z.items() if not k.startswith("screen")}
    with open(tmp_path / SNAPSHOT, "wb") as f:
        np.savez(f, **parts)
    with pytest.raises(ValueError, match="missing.*screen"):
        Shard(0, tmp_path, CFG)


def test_ids_of_no_kind_are_refused(tmp_path: Path) -> None:
    s = Shard(0, tmp_path, CFG)
    bad = make_batch(1, 2)
    bad.ids[1] |= 1 << (FRAME_BITS - 2)  # kind bits 01
    with pytest.raises(ValueError, match="no row kind"):
        s.add(bad)
    assert s.video_ids() == []


def test_a_text_space_grows_into_a_trained_index_beside_the_frames(tmp_path: Path) -> None:
    """Each space picks its index type by its own size; a rebuild takes only its kind's rows."""
    cfg = Config(faiss_threads=1, index_exact_max=200, index_nprobe=64)
    s = Shard(0, tmp_path, cfg)
    speech = [texts(v, "speech", 60, seed=v) for v in range(1, 6)]
    for v, rows in enumerate(speech, start=1):
        s.add(FusedBatch.concat([make_batch(v, 10, seed=100 + v), rows]))
    stats = s.stats()
    assert stats["index"]["speech"].startswith("IVF")
    assert stats["index"]["visual"] == stats["index"]["screen"] == "IDMap2,Flat"
    q = np.concatenate([r.space("semantic") for r in speech])
    _, ids, _ = s.search("speech", q, 1)
    assert (ids[:, 0] == np.concatenate([r.ids for r in speech])).mean() >= 0.97
    _, ids, _ = s.search("speech", q[:60], 5, videos=[1])  # the exact path for a small subset
    assert ids[:, 0].tolist() == speech[0].ids.tolist()
    assert s.delete_video(2) == 70
    assert s.stats()["vectors"] == {"visual": 40, "semantic": 40, "speech": 240, "screen": 0}
    s.snapshot()

    def loaded(stats: dict) -> dict:  # what a restart must bring back ("trained": this run's)
        return {k: v for k, v in stats.items() if k != "trained"}

    assert loaded(Shard(0, tmp_path, cfg).stats()) == loaded(s.stats())
