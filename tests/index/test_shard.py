from __future__ import annotations

import os
from pathlib import Path

import faiss
import numpy as np
import pytest

from vifusion.config import Config
from vifusion.index.shard import SNAPSHOT, WAL_DIR, Shard
from vifusion.index.wal import Delete, LogCorrupt
from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FusedBatch, vector_id, video_of

from ._helpers import assert_same_answers, make_batch, record_offsets

CFG = Config(faiss_threads=1)


@pytest.fixture
def shard(tmp_path: Path) -> Shard:
    s = Shard(0, tmp_path / "shard-0", CFG)
    s.add(make_batch(3, 20, seed=3))
    s.add(make_batch(4, 15, seed=4))
    return s


def _snapshot_bytes(directory: Path) -> bytes:
    return (directory / SNAPSHOT).read_bytes()


@pytest.mark.parametrize("space", ["visual", "semantic"])
def test_add_then_search_finds_exact_vector(shard: Shard, space: str) -> None:
    batch = make_batch(3, 20, seed=3)
    q = batch.space(space)[[7, 12]]
    scores, ids, times = shard.search(space, q, 5)
    assert scores.shape == (2, 5) and scores.dtype == np.float32
    assert ids.shape == (2, 5) and ids.dtype == np.int64
    assert times.shape == (2, 5, 2) and times.dtype == np.float32
    assert ids[:, 0].tolist() == [vector_id(3, 7), vector_id(3, 12)]
    np.testing.assert_allclose(scores[:, 0], 1.0, atol=1e-5)
    assert (scores[:, 1:] < 0.5).all()  # random unit vectors are nearly orthogonal
    np.testing.assert_array_equal(times[:, 0], [[7.0, 8.0], [12.0, 13.0]])
    assert (np.diff(scores, axis=1) <= 0).all()


def test_search_pads_missing_with_minus_one(tmp_path: Path) -> None:
    s = Shard(0, tmp_path, CFG)
    q = make_batch(1, 2, seed=9).space("semantic")
    scores, ids, times = s.search("semantic", q, 3)
    assert (ids == -1).all() and (times == 0).all()

    s.add(make_batch(1, 2, seed=1))
    scores, ids, times = s.search("semantic", q, 3)
    assert (ids[:, :2] >= 0).all() and (ids[:, 2] == -1).all()
    assert (times[:, 2] == 0).all() and (times[:, :2, 1] > 0).all()


def test_search_rejects_bad_requests(shard: Shard) -> None:
    with pytest.raises(ValueError, match="unknown space"):
        shard.search("audio", np.zeros((1, SEMANTIC_DIM), np.float32), 3)
    with pytest.raises(ValueError, match=r"\(nq, 1280\)"):
        shard.search("visual", np.zeros((1, SEMANTIC_DIM), np.float32), 3)
    with pytest.raises(ValueError, match=r"\(nq, 384\)"):
        shard.search("semantic", np.zeros(SEMANTIC_DIM, np.float32), 3)
    with pytest.raises(ValueError, match="k must"):
        shard.search("semantic", np.zeros((1, SEMANTIC_DIM), np.float32), 0)


def test_empty_batch_and_stats(tmp_path: Path) -> None:
    s = Shard(5, tmp_path, CFG)
    empty = FusedBatch(
        ids=np.empty(0, np.int64),
        times=np.empty((0, 2), np.float32),
        features=np.empty((0, VISUAL_DIM + SEMANTIC_DIM), np.float32),
    )
    assert s.add(empty) == 0
    assert s.add(make_batch(8, 4)) == 4
    assert s.add(make_batch(2, 3, seed=2)) == 7
    stats = s.stats()
    assert 0 < stats.pop("times_bytes") <= 7 * 170 + 2 * 100  # recent rows: not merged yet
    assert stats == {
        "shard": 5,
        "vectors": {"visual": 7, "semantic": 7, "speech": 0, "screen": 0},
        "videos": 2,
        "index": dict.fromkeys(("visual", "semantic", "speech", "screen"), "IDMap2,Flat"),
        "index_bytes": {
            "visual": 7 * (4 * 1280 + 8),
            "semantic": 7 * (4 * 384 + 8),
            "speech": 0,
            "screen": 0,
        },
        "trained": {},
        "seq": 3,
        "snapshot_seq": 0,
    }
    assert s.video_ids() == [2, 8]


def test_sets_faiss_threads(tmp_path: Path) -> None:
    before = faiss.omp_get_max_threads()
    try:
        Shard(0, tmp_path, CFG)
        assert faiss.omp_get_max_threads() == 1
    finally:
        faiss.omp_set_num_threads(before)


def test_delete_video_removes_only_that_video(shard: Shard) -> None:
    assert shard.delete_video(3) == 20
    assert shard.delete_video(3) == 0
    assert shard.stats()["vectors"] == {"visual": 15, "semantic": 15, "speech": 0, "screen": 0}
    assert shard.video_ids() == [4]
    for space in ("visual", "semantic"):
        q = np.concatenate(
            [make_batch(3, 20, seed=3).space(space), make_batch(4, 15, seed=4).space(space)]
        )
        _, ids, _ = shard.search(space, q, 20)
        found = ids[ids >= 0]
        assert (video_of(found) == 4).all()
        assert ids[20:, 0].tolist() == [vector_id(4, i) for i in range(15)]


def test_resent_batch_id_is_ignored(tmp_path: Path) -> None:
    s = Shard(0, tmp_path, CFG)
    batch = make_batch(1, 10)
    assert s.add(batch) == 10
    assert s.add(batch) == 10
    s.delete_video(1)
    assert s.add(batch) == 0  # a late duplicate must not resurrect a deleted video


def test_a_staged_batch_is_searchable_at_once_and_durable_once_committed(tmp_path: Path) -> None:
    """``stage`` applies a batch with its log record not yet synced; a copy of it sent again
    before the sync is not logged twice and commits through the same record."""
    s = Shard(0, tmp_path / "s", CFG)
    batch = make_batch(5, 10, seed=5)
    n, seq = s.stage(batch)
    _, ids, _ = s.search("visual", batch.features[:1, :VISUAL_DIM], 1)
    assert n == 10 and ids[0, 0] == batch.ids[0]
    assert s.stage(batch) == (10, seq)
    assert s.commit(seq) > 0
    assert s.commit(seq) == 0.0  # durable already
    assert Shard(0, tmp_path / "s", CFG, writer=False).ntotal == 10


def test_readding_ids_replaces_them(tmp_path: Path) -> None:
    s = Shard(0, tmp_path, CFG)
    s.add(make_batch(1, 10, seed=1))
    new = make_batch(1, 5, seed=2, first_frame=3, interval=2.0)  # same ids 3..7, new vectors/times
    assert s.add(new) == 10
    scores, ids, times = s.search("visual", new.space("visual"), 1)
    assert ids[:, 0].tolist() == new.ids.tolist()
    np.testing.assert_allclose(scores[:, 0], 1.0, atol=1e-5)
    np.testing.assert_array_equal(times[:, 0], new.times)
    old_scores, _, _ = s.search("visual", make_batch(1, 10, seed=1).space("visual")[3:8], 1)
    assert (old_scores < 0.5).all()  # the replaced vectors are gone: no exact match left


def test_repeated_id_within_a_batch_keeps_last(tmp_path: Path) -> None:
    s = Shard(0, tmp_path, CFG)
    b = make_batch(1, 3, seed=1)
    b = FusedBatch(
        ids=b.ids[[0, 1, 0]], times=b.times[[0, 1, 2]], features=b.features[[0, 1, 2]].copy()
    )
    assert s.add(b) == 2
    _, ids, times = s.search("semantic", b.space("semantic")[2:], 1)
    assert ids[0, 0] == b.ids[0] and times[0, 0].tolist() == [2.0, 3.0]


def _same_results(a: Shard, b: Shard) -> None:
    """``a`` and ``b`` answer alike rows of video 4 and random queries, in both spaces."""
    rng = np.random.default_rng(0)
    queries = {
        space: np.concatenate(
            [make_batch(4, 15, seed=4).space(space)[:3], rng.standard_normal((4, d))]
        ).astype(np.float32)
        for space, d in (("visual", VISUAL_DIM), ("semantic", SEMANTIC_DIM))
    }
    assert_same_answers(a, b, queries)


@pytest.mark.parametrize("snapshot_first", [False, True])
def test_every_acknowledged_write_survives_a_restart(
    shard: Shard, tmp_path: Path, snapshot_first: bool
) -> None:
    if snapshot_first:
        shard.snapshot()
    shard.add(make_batch(9, 5, seed=9))
    shard.delete_video(3)
    # No close, no snapshot after the writes: as if the process had been killed.
    reloaded = Shard(0, tmp_path / "shard-0", CFG)
    assert reloaded.video_ids() == [4, 9]
    assert reloaded.stats()["vectors"] == {"visual": 20, "semantic": 20, "speech": 0, "screen": 0}
    assert reloaded.stats()["seq"] == shard.stats()["seq"] == 4
    _same_results(shard, reloaded)


def test_snapshot_drops_the_log_it_covers(shard: Shard, tmp_path: Path) -> None:
    wal = tmp_path / "shard-0" / WAL_DIR
    assert sum(p.stat().st_size for p in wal.iterdir()) > 35 * 4 * (VISUAL_DIM + SEMANTIC_DIM)
    shard.snapshot()
    assert list(wal.iterdir()) == []
    shard.add(make_batch(9, 5, seed=9))
    reloaded = Shard(0, tmp_path / "shard-0", CFG)
    assert reloaded.stats()["snapshot_seq"] == 2 and reloaded.stats()["seq"] == 3
    assert reloaded.video_ids() == [3, 4, 9]
    reloaded.add(make_batch(10, 2, seed=10))  # numbering goes on after the snapshot
    assert Shard(0, tmp_path / "shard-0", CFG).stats()["seq"] == 4


def test_log_past_the_threshold_triggers_a_snapshot(tmp_path: Path) -> None:
    s = Shard(0, tmp_path, Config(faiss_threads=1, snapshot_log_bytes=50_000))
    s.add(make_batch(1, 5, seed=1))  # ~33 KB: under the threshold
    assert not (tmp_path / SNAPSHOT).exists()
    s.add(make_batch(2, 5, seed=2))
    assert s.stats()["snapshot_seq"] == 2 and (tmp_path / SNAPSHOT).exists()
    assert Shard(0, tmp_path, CFG).video_ids() == [1, 2]


def test_resent_batch_is_still_ignored_after_a_restart(tmp_path: Path) -> None:
    s = Shard(0, tmp_path, CFG)
    batch = make_batch(1, 10)
    s.add(batch)
    s.snapshot()
    s.delete_video(1)
    again = Shard(0, tmp_path, CFG)
    assert again.add(batch) == 0  # its batch id came back from the snapshot


def test_reload_of_empty_directory_and_empty_snapshot(tmp_path: Path) -> None:
    s = Shard(0, tmp_path, CFG)
    s.snapshot()
    assert (tmp_path / SNAPSHOT).exists()
    assert Shard(0, tmp_path, CFG).stats()["vectors"] == {
        "visual": 0,
        "semantic": 0,
        "speech": 0,
        "screen": 0,
    }


def test_snapshot_without_changes_does_not_rewrite(shard: Shard, tmp_path: Path) -> None:
    shard.snapshot()
    before = os.stat(tmp_path / "shard-0" / SNAPSHOT).st_ino
    shard.snapshot()
    assert os.stat(tmp_path / "shard-0" / SNAPSHOT).st_ino == before
    shard.delete_video(3)
    shard.snapshot()
    assert os.stat(tmp_path / "shard-0" / SNAPSHOT).st_ino != before


def test_torn_temp_file_from_a_crash_is_ignored(tmp_path: Path) -> None:
    s = Shard(0, tmp_path, CFG)
    s.add(make_batch(1, 6, seed=1))
    s.snapshot()
    # A crash after writing half of a newer snapshot, before the rename.
    stray = tmp_path / ".snapshot-crash.tmp"
    stray.write_bytes(_snapshot_bytes(tmp_path)[:1000])
    reloaded = Shard(0, tmp_path, CFG)
    assert reloaded.video_ids() == [1]
    assert not stray.exists()


def test_failed_snapshot_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = Shard(0, tmp_path, CFG)
    s.add(make_batch(1, 6, seed=1))
    s.snapshot()
    good = _snapshot_bytes(tmp_path)
    s.add(make_batch(2, 6, seed=2))

    def crash(*args: object) -> None:
        raise OSError("disk pulled")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk pulled"):
        s.snapshot()
    monkeypatch.undo()
    assert _snapshot_bytes(tmp_path) == good
    assert not list(tmp_path.glob(".snapshot-*"))
    assert Shard(0, tmp_path, CFG).video_ids() == [1, 2]  # the log still holds video 2
    s.snapshot()
    assert Shard(0, tmp_path, CFG).video_ids() == [1, 2]


def test_snapshot_with_wrong_dims_is_rejected(tmp_path: Path) -> None:
    Shard(0, tmp_path, CFG).snapshot()
    with np.load(tmp_path / SNAPSHOT) as z:
        parts = dict(z)
    parts["visual"] = faiss.serialize_index(faiss.IndexIDMap2(faiss.IndexFlatIP(8)))
    parts["visual_blobs"] = np.array([len(parts["visual"])])
    with open(tmp_path / SNAPSHOT, "wb") as f:
        np.savez(f, **parts)
    with pytest.raises(ValueError, match="dim 8"):
        Shard(0, tmp_path, CFG)


def test_snapshot_of_the_previous_format_loads(tmp_path: Path) -> None:
    """Format 2 held each space as one FAISS blob; a shard written by it still starts."""
    s = Shard(0, tmp_path, CFG)
    s.add(make_batch(1, 30))
    s.snapshot()
    with np.load(tmp_path / SNAPSHOT) as z:
        parts = {k: v for k, v in z.items() if not k.endswith("_blobs")}
    parts["format"] = np.int64(2)
    with open(tmp_path / SNAPSHOT, "wb") as f:
        np.savez(f, **parts)
    back = Shard(0, tmp_path, CFG)
    assert back.video_ids() == [1] and back.ntotal == s.ntotal


def test_garbage_snapshot_is_rejected_clearly(tmp_path: Path) -> None:
    (tmp_path / SNAPSHOT).write_bytes(b"not a snapshot")
    with pytest.raises(ValueError, match="not a shard snapshot"):
        Shard(0, tmp_path, CFG)


def test_search_restricted_to_videos_is_exact(shard: Shard) -> None:
    q = make_batch(3, 20, seed=3).space("visual")[[5]]
    scores, ids, _ = shard.search("visual", q, 10, videos=[4])
    assert set(video_of(ids[ids >= 0]).tolist()) == {4}
    assert (ids >= 0).sum() == 10  # filtered before top-k: a full page of video 4
    full_scores, full_ids, _ = shard.search("visual", q, 35)
    expected = full_ids[0][video_of(full_ids[0]) == 4][:10]
    assert ids[0].tolist() == expected.tolist()
    _, none_ids, none_times = shard.search("visual", q, 3, videos=[99])
    assert (none_ids == -1).all() and not none_times.any()


def test_frames_returns_a_videos_stored_vectors_in_a_time_range(shard: Shard) -> None:
    batch = make_batch(4, 15, seed=4)
    times, vectors = shard.frames("visual", 4, 2.5, 5.0)
    np.testing.assert_array_equal(times, [[2, 3], [3, 4], [4, 5]])
    np.testing.assert_allclose(vectors, batch.space("visual")[2:5], atol=1e-6)
    times, vectors = shard.frames("semantic", 4, 100, 200)
    assert times.shape == (0, 2) and vectors.shape == (0, SEMANTIC_DIM)
    with pytest.raises(ValueError):
        shard.frames("audio", 4, 0, 1)


def test_frames_with_a_limit_reads_only_that_many_spread_over_the_whole_video(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored-clip search asks for 0 s to 1e7 s of a long video: the shard reads the
    vectors of at most ``limit`` rows (not every row in range, under the lock every write
    and search waits on), spread evenly from the video's first row to its last."""
    s = Shard(0, tmp_path, CFG)
    for first in range(0, 1200, 400):
        s.add(make_batch(5, 400, seed=first, first_frame=first))
    read: list[int] = []
    visual = s._spaces["visual"]
    real = visual.reconstruct

    def counting(ids: np.ndarray) -> np.ndarray:  # the seam: how many rows the index is read for
        read.append(len(ids))
        return real(ids)

    monkeypatch.setattr(visual, "reconstruct", counting)
    times, vectors = s.frames("visual", 5, 0, 1e7, limit=64)
    assert read == [64]
    assert times.shape == (64, 2) and vectors.shape == (64, VISUAL_DIM)
    starts = times[:, 0].astype(int)
    assert starts[0] == 0 and starts[-1] == 1199  # the whole video, not its first 64 s
    assert set(np.diff(starts).tolist()) == {19, 20}  # evenly: 1199 / 63 = 19.03
    expected = np.concatenate(
        [make_batch(5, 400, seed=f, first_frame=f).space("visual") for f in range(0, 1200, 400)]
    )
    np.testing.assert_allclose(vectors, expected[starts], atol=1e-6)
    assert len(s.frames("visual", 5, 10.5, 13.0, limit=64)[0]) == 3  # fewer than the limit: all


def test_grows_into_a_trained_index_in_the_background_losing_no_write(tmp_path: Path) -> None:
    cfg = Config(faiss_threads=1, index_exact_max=300, index_nprobe=64)
    s = Shard(0, tmp_path, cfg, background=True)
    batches = [make_batch(v, 40, seed=v) for v in range(1, 31)]
    for b in batches:  # the rebuild starts at video 8 and runs while the rest arrive
        s.add(b)
    s.delete_video(2)
    s.wait_idle()
    stats = s.stats()
    assert stats["index"]["visual"].startswith("IVF") and stats["index"]["semantic"].startswith(
        "IVF"
    )
    assert stats["vectors"] == {"visual": 29 * 40, "semantic": 29 * 40, "speech": 0, "screen": 0}
    for space in ("visual", "semantic"):
        q = np.concatenate([b.space(space) for b in batches])
        _, ids, _ = s.search(space, q, 1)
        want = np.concatenate([b.ids for b in batches])
        found = ids[:, 0] == want
        assert found[40:80].sum() == 0  # the deleted video
        assert found.sum() >= 0.97 * 29 * 40  # each frame finds itself (8-bit codes, probed lists)
    s.snapshot()
    again = Shard(0, tmp_path, cfg)
    assert again.stats()["index"] == stats["index"] and again.video_ids() == s.video_ids()
    _same_results(s, again)


def test_a_follower_logs_forwarded_operations_in_its_own_directory_and_reports_a_gap(
    tmp_path: Path,
) -> None:
    primary = Shard(0, tmp_path / "p", CFG)
    follower = Shard(0, tmp_path / "f", CFG)
    b1, b2, b3 = (make_batch(v, 4, seed=v) for v in (1, 2, 3))
    for b in (b1, b2, b3):
        primary.add(b)
    assert follower.apply(1, b1) == 1
    assert follower.apply(3, b3) == 1  # seq 2 never reached it: nothing applied, a gap named
    assert follower.apply(2, b2) == 2
    assert follower.apply(3, b3) == 3
    assert follower.apply(2, b2) == 3  # a late duplicate changes nothing
    primary.delete_video(1)
    follower.apply(4, Delete(1))
    _same_results(primary, follower)
    # its own log, synced: a restart of the follower alone holds every write it answered
    again = Shard(0, tmp_path / "f", CFG)
    assert again.stats()["seq"] == 4 and again.video_ids() == [2, 3]
    _same_results(primary, again)
    reader = Shard(0, tmp_path / "p", CFG, writer=False)
    with pytest.raises(RuntimeError, match="only reads"):
        reader.add(make_batch(9, 1))


def test_a_replica_behind_gets_the_log_it_lacks_or_the_snapshot_and_the_log_after_it(
    tmp_path: Path,
) -> None:
    source = Shard(0, tmp_path / "src", CFG)
    for v in (1, 2, 3):
        source.add(make_batch(v, 5, seed=v))
    behind = Shard(0, tmp_path / "behind", CFG)
    behind.apply(1, make_batch(1, 5, seed=1))
    changes = source.changes_after(behind.stats()["seq"])
    assert changes.snapshot is None and [s for s, _ in changes.records] == [2, 3]
    assert behind.install(changes) == 3
    _same_results(source, behind)
    source.snapshot()  # the log before seq 3 is gone from the source
    source.delete_video(2)
    empty = Shard(0, tmp_path / "empty", CFG)
    changes = source.changes_after(0)
    assert changes.snapshot is not None and [s for s, _ in changes.records] == [4]
    assert empty.install(changes) == 4
    _same_results(source, empty)
    assert empty.video_ids() == [1, 3]
    # installed durably, in its own directory: it restarts whole, and then takes more
    again = Shard(0, tmp_path / "empty", CFG)
    assert again.stats()["seq"] == 4
    _same_results(source, again)
    source.add(make_batch(5, 3, seed=5))
    assert again.install(source.changes_after(4)) == 5
    assert Shard(0, tmp_path / "empty", CFG).video_ids() == [1, 3, 5]
    # nothing to send to a replica that holds it all; a replica never goes back
    assert source.changes_after(5).records == []
    assert again.install(source.changes_after(2)) == 5


@pytest.mark.parametrize("snapshot_first", [False, True])
def test_a_replica_holding_writes_its_source_never_made_is_replaced_by_the_sources_state(
    tmp_path: Path, snapshot_first: bool
) -> None:
    """A directory from another history (writes that never reached the source): what it
    holds beyond the source is dropped, not kept beside the source's writes."""
    source = Shard(0, tmp_path / "src", CFG)
    other = Shard(0, tmp_path / "other", CFG)
    for v in (1, 2):
        source.add(make_batch(v, 4, seed=v))
        other.apply(v, make_batch(v, 4, seed=v))
    if snapshot_first:
        source.snapshot()
    other.apply(3, make_batch(8, 4, seed=8))  # a write the source never made
    assert other.install(source.changes_after(3)) == 2
    assert other.video_ids() == [1, 2]
    _same_results(source, other)
    again = Shard(0, tmp_path / "other", CFG)
    assert again.stats()["seq"] == 2 and again.video_ids() == [1, 2]
    source.add(make_batch(3, 4, seed=3))
    assert again.apply(3, make_batch(3, 4, seed=3)) == 3
    _same_results(source, again)


def test_a_replica_whose_record_at_a_seq_differs_from_its_sources_takes_the_sources_state(
    tmp_path: Path,
) -> None:
    """Same seqs, another history (a write at seq 2 that never reached the source, which
    wrote another at 2): told by the record's checksum, and replaced."""
    source = Shard(0, tmp_path / "src", CFG)
    other = Shard(0, tmp_path / "other", CFG)
    source.add(make_batch(1, 4, seed=1))
    other.apply(1, make_batch(1, 4, seed=1))
    source.add(make_batch(2, 4, seed=2))
    other.apply(2, make_batch(8, 4, seed=8))
    source.add(make_batch(3, 4, seed=3))
    assert other.position()[1] != source.crc_at(2)
    assert other.install(source.changes_after(*other.position())) == 3
    assert other.video_ids() == [1, 2, 3]
    _same_results(source, other)
    # the same history: only what it lacks
    source.add(make_batch(4, 4, seed=4))
    changes = source.changes_after(*other.position())
    assert not changes.reset and [s for s, _ in changes.records] == [4]


def test_a_replica_is_sent_only_what_is_durable_at_its_source(tmp_path: Path) -> None:
    source = Shard(0, tmp_path / "src", CFG)
    source.add(make_batch(1, 3, seed=1))
    _, seq = source.stage(make_batch(2, 3, seed=2))  # logged, applied, not yet synced
    assert [s for s, _ in source.changes_after(0).records] == [1]
    source.commit(seq)
    assert [s for s, _ in source.changes_after(0).records] == [1, 2]


def test_a_log_torn_mid_record_by_a_crash_is_survived(tmp_path: Path) -> None:
    s = Shard(0, tmp_path, CFG)
    s.add(make_batch(1, 4, seed=1))
    s.add(make_batch(2, 4, seed=2))
    segment = next((tmp_path / WAL_DIR).glob("*.log"))
    with open(segment, "r+b") as f:  # the crash hit while the second record was written
        f.truncate(segment.stat().st_size - 100)
    again = Shard(0, tmp_path, CFG)
    assert again.video_ids() == [1] and again.stats()["seq"] == 1
    again.add(make_batch(3, 4, seed=3))
    assert Shard(0, tmp_path, CFG).video_ids() == [1, 3]


@pytest.mark.parametrize(
    ("record", "said"),
    [(0, r"at byte 8, and a whole record \(seq 2\)"), (4, r"at byte \d+, the last, whole")],
)
def test_a_damaged_acknowledged_record_stops_the_shard_naming_file_and_byte(
    tmp_path: Path, record: int, said: str
) -> None:
    """Not a torn tail: starting would drop acknowledged writes (the damaged one, and those
    after it), so neither the writer nor a reader starts, and the log is left as it was for
    the operator. The last record too: it was synced whole before it was acknowledged."""
    s = Shard(0, tmp_path, CFG)
    for v in range(1, 6):
        s.add(make_batch(v, 4, seed=v))
    segment = next((tmp_path / WAL_DIR).glob("*.log"))
    data = bytearray(segment.read_bytes())
    data[record_offsets(segment)[record] + 100] ^= 0x01  # in its features
    segment.write_bytes(bytes(data))
    for writer in (True, False):
        with pytest.raises(LogCorrupt, match=rf"{segment}: damaged record {said}"):
            Shard(0, tmp_path, CFG, writer=writer)
    assert segment.read_bytes() == bytes(data)
