"""A compressed space: past ``index_compress_min`` vectors a shard's space becomes IVF-PQ,
trained in the background, and re-ranks its candidates with the exact vectors of its vector
file; that file survives restarts and crashes, travels to replicas, and is checked."""

from __future__ import annotations

import functools
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from vifusion.config import Config
from vifusion.index import Shard
from vifusion.index import space as space_mod
from vifusion.index._vectors import HEADER, VectorFileDamaged, path_for
from vifusion.types import FRAME_BITS, SEMANTIC_DIM, VISUAL_DIM, FusedBatch, vector_id

from ._helpers import assert_same_answers

FRAMES = 1000  # per video
CENTRES = 64


def _cfg(**kw) -> Config:
    # exact up to 2,000 frames, then compressed (small codes: a fast test)
    base = dict(
        faiss_threads=1,
        index_exact_max=1_000_000,
        index_compress_min=2_000,
        index_pq_visual_bytes=32,
        index_pq_text_bytes=16,
    )
    return Config(**{**base, **kw})


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@functools.cache
def _features(video: int) -> np.ndarray:
    """Frames near one of a few shared centres (clear structure, as real frames have)."""
    rng = np.random.default_rng(video)
    out = []
    for d in (VISUAL_DIM, SEMANTIC_DIM):
        centres = _unit(np.random.default_rng(d).standard_normal((CENTRES, d), np.float32))
        pick = rng.integers(0, CENTRES, FRAMES)
        out.append(_unit(centres[pick] + rng.standard_normal((FRAMES, d), np.float32) * 0.05))
    return np.concatenate(out, axis=1)


def _video(video: int) -> FusedBatch:
    ids = np.array([vector_id(video, f) for f in range(FRAMES)], np.int64)
    times = np.stack([np.arange(FRAMES), np.arange(FRAMES) + 1], 1).astype(np.float32)
    return FusedBatch(ids=ids, times=times, features=_features(video))


def _queries(videos: list[int], space: str, n: int = 50) -> np.ndarray:
    """Stored frames with a little noise."""
    lo, hi = (0, VISUAL_DIM) if space == "visual" else (VISUAL_DIM, VISUAL_DIM + SEMANTIC_DIM)
    rng = np.random.default_rng(99)
    x = np.concatenate([_features(v)[:, lo:hi] for v in videos])
    rows = rng.choice(len(x), n, replace=False)
    return _unit(x[rows] + rng.standard_normal((n, hi - lo), np.float32) * 0.02)


def _recall(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(got, want)]))


def _compressed(shard: Shard) -> dict[str, str]:
    return {s: f for s, f in shard.stats()["index"].items() if "PQ" in f}


@pytest.fixture(scope="module")
def exact(tmp_path_factory) -> Shard:
    """The same three videos in an exact (flat) shard: the answers to match."""
    s = Shard(0, tmp_path_factory.mktemp("exact"), _cfg(index_compress_min=0))
    for v in (1, 2, 3):
        s.add(_video(v))
    return s


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A shard directory whose spaces compressed (trained once for the module), with a
    snapshot: each test takes a copy."""
    directory = tmp_path_factory.mktemp("trained")
    s = Shard(0, directory, _cfg())
    for v in (1, 2, 3):
        s.add(_video(v))
    s.snapshot()
    return directory


def _copy(trained: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "shard"))


def test_past_the_threshold_a_space_compresses_and_reranking_finds_the_exact_neighbours(
    trained: Path, exact: Shard
) -> None:
    s = Shard(0, trained, _cfg())
    tmp_path = trained
    assert _compressed(s) == {"visual": "IVF128,PQ32", "semantic": "IVF128,PQ16"}
    assert path_for(tmp_path, "visual").stat().st_size == HEADER + 3 * FRAMES * VISUAL_DIM * 2
    for space in ("visual", "semantic"):
        q = _queries([1, 2, 3], space)
        scores, ids, _ = s.search(space, q, 10)
        want_scores, want, _ = exact.search(space, q, 10)
        assert _recall(ids, want) >= 0.95
        # the scores are the exact vectors' (fp16), not the codes' approximations
        np.testing.assert_allclose(scores[:, 0], want_scores[:, 0], atol=2e-3)
    # a filter (a small subset: searched exactly from the vector file)
    _, ids, _ = s.search("visual", _queries([2], "visual"), 10, videos=[2])
    assert ((ids >> FRAME_BITS) == 2).all()


def test_searches_answer_during_training_and_writes_meanwhile_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started, release = threading.Event(), threading.Event()
    build = space_mod.SpaceIndex.build_compressed.__func__

    def held_build(cls, *a, **kw):  # the real training, once the test lets it
        started.set()
        assert release.wait(60)
        return build(cls, *a, **kw)

    monkeypatch.setattr(space_mod.SpaceIndex, "build_compressed", classmethod(held_build))
    s = Shard(0, tmp_path, _cfg(), background=True)
    s.add(_video(1))
    s.add(_video(2))
    s.add(_video(3))
    assert started.wait(60)
    # training: the exact index still answers, and takes writes
    q = _features(3)[:5, :VISUAL_DIM]
    _, ids, _ = s.search("visual", q, 1)
    assert ids[:, 0].tolist() == [vector_id(3, f) for f in range(5)]
    s.add(_video(4))
    s.delete_video(1)
    assert not _compressed(s)
    release.set()
    s.wait_idle()
    assert set(_compressed(s)) == {"visual", "semantic"}
    _, ids, _ = s.search("visual", _features(4)[:5, :VISUAL_DIM], 1)
    assert ids[:, 0].tolist() == [vector_id(4, f) for f in range(5)]
    assert s.stats()["vectors"]["visual"] == 3 * FRAMES
    _, ids, _ = s.search("visual", _features(1)[:20, :VISUAL_DIM], 10)
    assert not ((ids >> FRAME_BITS) == 1).any() and 1 not in s.video_ids()


def test_a_delete_hides_its_frames_in_a_compressed_space(trained: Path, tmp_path: Path) -> None:
    s = Shard(0, _copy(trained, tmp_path), _cfg())
    assert _compressed(s)
    q = _features(2)[:20, :VISUAL_DIM]
    _, ids, _ = s.search("visual", q, 1)
    assert ids[:, 0].tolist() == [vector_id(2, f) for f in range(20)]
    s.delete_video(2)
    _, ids, _ = s.search("visual", q, 10)
    assert not np.isin(ids, [vector_id(2, f) for f in range(FRAMES)]).any()
    _, ids, _ = s.search("visual", q, 10, videos=[2])
    assert (ids == -1).all()


def test_a_restart_loads_the_trained_index_and_cuts_a_torn_tail(
    trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp_path = _copy(trained, tmp_path)
    s = Shard(0, tmp_path, _cfg())
    s.add(_video(4))  # in the log only: its rows are written again on replay
    q = _queries([1, 2, 3, 4], "visual")
    before = s.search("visual", q, 10)
    del s
    vectors = path_for(tmp_path, "visual")
    with open(vectors, "ab") as f:  # a crash mid-append: half a row
        f.write(b"\x01" * VISUAL_DIM)

    def no_training(*a, **kw):
        raise AssertionError("a restart must load the trained index, not train again")

    monkeypatch.setattr(space_mod.SpaceIndex, "build", no_training)
    s = Shard(0, tmp_path, _cfg())
    assert _compressed(s)
    for x, y in zip(before, s.search("visual", q, 10), strict=True):
        np.testing.assert_array_equal(x, y)
    assert vectors.stat().st_size == HEADER + 4 * FRAMES * VISUAL_DIM * 2


def test_a_vector_file_missing_synced_rows_stops_the_shard_naming_it(
    trained: Path, tmp_path: Path
) -> None:
    tmp_path = _copy(trained, tmp_path)
    vectors = path_for(tmp_path, "semantic")
    with open(vectors, "r+b") as f:
        f.truncate(HEADER + 100 * SEMANTIC_DIM * 2)
    with pytest.raises(
        VectorFileDamaged, match="holds 100 whole vector rows, the snapshot counts 3000"
    ):
        Shard(0, tmp_path, _cfg())


def test_a_replica_catching_up_gets_the_vector_files_with_the_snapshot(
    trained: Path, tmp_path: Path
) -> None:
    source = Shard(0, _copy(trained, tmp_path), _cfg())
    source.add(_video(4))  # after the snapshot: sent as log records
    changes = source.changes_after(0)
    assert sorted(changes.vectors) == ["semantic", "visual"]

    replica = Shard(0, tmp_path / "b", _cfg())
    replica.install(changes)
    assert path_for(tmp_path / "b", "visual").stat().st_size == (
        HEADER + 4 * FRAMES * VISUAL_DIM * 2
    )
    q = {s: _queries([1, 2, 3, 4], s) for s in ("visual", "semantic")}
    assert_same_answers(source, replica, q)
    del replica
    assert_same_answers(source, Shard(0, tmp_path / "b", _cfg()), q)


@pytest.mark.slow
def test_check_names_a_vector_file_that_lost_synced_rows(ray_session, tmp_path, capsys) -> None:
    import ray

    from vifusion.cli import parser as cli
    from vifusion.index.router import shard_dir
    from vifusion.runtime import Runtime

    cfg = _cfg(data_dir=tmp_path / "data")  # two shards, as the CLI opens it
    with Runtime(cfg, writer=True) as rt:
        handle = rt.shards.handles[0]
        for v in (2, 4, 6):
            ray.get(handle.add.remote(_video(v)))
        ray.get(handle.wait_idle.remote())
        ray.get(handle.snapshot.remote())
        assert "PQ" in ray.get(handle.stats.remote())["index"]["visual"]
    vectors = path_for(shard_dir(cfg.data_dir, 0), "visual")
    with open(vectors, "r+b") as f:
        f.truncate(HEADER + 10 * VISUAL_DIM * 2 + 7)  # and a torn row

    assert cli.main(["check", "--data-dir", str(cfg.data_dir)]) == 1
    said = capsys.readouterr().err
    assert said.startswith(
        f"vifusion check: a shard cannot start: VectorFileDamaged: {vectors}: holds 10 whole "
        "vector rows, the snapshot counts 3000"
    )


def test_shards_side_by_side_train_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-training holds floats beside two indexes: shards of one machine take turns."""
    build = space_mod.SpaceIndex.build_compressed.__func__
    running, most, calls, other_started = [0], [0], [0], threading.Event()
    count = threading.Lock()

    def watched(cls, *a, **kw):
        with count:
            running[0] += 1
            calls[0] += 1
            first = calls[0] == 1
            most[0] = max(most[0], running[0])
            if running[0] > 1:
                other_started.set()
        if first:  # long enough for another shard's training to start, if it may
            other_started.wait(2)
        try:
            return build(cls, *a, **kw)
        finally:
            with count:
                running[0] -= 1

    monkeypatch.setattr(space_mod.SpaceIndex, "build_compressed", classmethod(watched))
    shards = [Shard(n, tmp_path / f"shard-{n}", _cfg(), background=True) for n in (0, 1)]
    for v in (1, 2, 3):
        for s in shards:
            s.add(_video(v))
    for s in shards:
        s.wait_idle()
        assert set(_compressed(s)) == {"visual", "semantic"}
    assert most[0] == 1


def test_a_snapshot_taken_during_training_is_replaced_once_the_index_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started, release = threading.Event(), threading.Event()
    build = space_mod.SpaceIndex.build_compressed.__func__

    def held_build(cls, *a, **kw):
        started.set()
        assert release.wait(60)
        return build(cls, *a, **kw)

    monkeypatch.setattr(space_mod.SpaceIndex, "build_compressed", classmethod(held_build))
    s = Shard(0, tmp_path, _cfg(), background=True)
    for v in (1, 2, 3):
        s.add(_video(v))
    assert started.wait(60)
    s.snapshot()  # holds the exact index; no write follows it
    release.set()
    s.wait_idle()
    assert set(_compressed(s)) == {"visual", "semantic"}
    q = _queries([1, 2, 3], "visual")
    before = s.search("visual", q, 10)
    del s  # as a crash leaves it: the snapshot and the log

    def no_training(*a, **kw):
        raise AssertionError("a restart must load the trained index, not train again")

    monkeypatch.setattr(space_mod.SpaceIndex, "build_compressed", classmethod(no_training))
    s = Shard(0, tmp_path, _cfg())
    assert set(_compressed(s)) == {"visual", "semantic"}
    for x, y in zip(before, s.search("visual", q, 10), strict=True):
        np.testing.assert_array_equal(x, y)


def test_a_changed_code_size_is_trained_after_a_restart_while_the_old_codes_serve(
    trained: Path, exact: Shard, tmp_path: Path
) -> None:
    directory = _copy(trained, tmp_path)
    s = Shard(0, directory, _cfg(index_pq_text_bytes=32), background=True)
    q = _queries([1, 2, 3], "semantic")
    _, ids, _ = s.search("semantic", q, 10)  # answered while the new codes train
    _, want, _ = exact.search("semantic", q, 10)
    assert _recall(ids, want) >= 0.95
    s.wait_idle()
    assert _compressed(s) == {"visual": "IVF128,PQ32", "semantic": "IVF128,PQ32"}
    assert s.ntotal == 3 * FRAMES
    _, ids, _ = s.search("semantic", q, 10)
    assert _recall(ids, want) >= 0.95
    s.wait_idle()  # the snapshot the re-training scheduled
    del s
    again = Shard(0, directory, _cfg(index_pq_text_bytes=32))
    assert _compressed(again)["semantic"] == "IVF128,PQ32"
    assert not again.stats()["trained"]  # loaded from the snapshot, not trained again


def test_a_reader_answers_from_the_codes_it_finds_and_trains_nothing(
    trained: Path, exact: Shard
) -> None:
    reader = Shard(0, trained, _cfg(index_pq_text_bytes=32), writer=False)
    assert _compressed(reader)["semantic"] == "IVF128,PQ16"  # its writer re-trains it
    assert not reader.stats()["trained"]
    q = _queries([1, 2, 3], "semantic")
    _, ids, _ = reader.search("semantic", q, 10)
    assert _recall(ids, exact.search("semantic", q, 10)[1]) >= 0.95
