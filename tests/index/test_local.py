"""``LocalShards``: a data dir's shards read in this process (what `vifusion search` does
without a service): the same answers as the shard actors, nothing written, a log that a
writer is appending to read up to its last whole record."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from vifusion.config import Config
from vifusion.index.layout import check_layout, shard_dir, shard_for
from vifusion.index.local import LocalShards
from vifusion.index.shard import Shard

from ._helpers import make_batch

VIDEOS = (10, 11, 12, 13)  # shards 0, 1, 0, 1


def _files(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``root``: its sha256 and mtime (ns)."""
    return {
        str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def cfg(tmp_path: Path) -> Config:
    return Config(data_dir=tmp_path / "data", num_shards=2, faiss_threads=1)


def _writers(cfg: Config) -> list[Shard]:
    check_layout(cfg.data_dir, cfg.num_shards)
    return [Shard(n, shard_dir(cfg.data_dir, n), cfg) for n in range(cfg.num_shards)]


def _fill(writers: list[Shard], videos=VIDEOS, frames: int = 8) -> None:
    for v in videos:
        writers[shard_for(v, len(writers))].add(make_batch(v, frames, seed=v))


def _query(video_id: int, frame: int, space: str = "visual") -> np.ndarray:
    return make_batch(video_id, 8, seed=video_id).space(space)[frame][None]


def test_finds_frames_on_every_shard_as_the_writers_hold_them(cfg: Config) -> None:
    writers = _writers(cfg)
    _fill(writers)
    writers[0].snapshot()  # shard 0 from a snapshot, shard 1 from its log
    local = LocalShards(cfg)
    q = np.concatenate([_query(11, 3), _query(12, 5)])
    found = local.search("visual", q, 20)
    assert found.missing == ()
    assert [(h.video_id, h.row) for h in (found[0][0], found[1][0])] == [(11, 3), (12, 5)]
    assert found[0][0].score == pytest.approx(1.0, abs=1e-5)
    assert len(found[0]) == 20 and {h.video_id for h in found[0]} == set(
        VIDEOS
    )  # 32 frames, both shards
    assert [h.score for h in found[0]] == sorted((h.score for h in found[0]), reverse=True)


def test_only_the_videos_asked_for(cfg: Config) -> None:
    _fill(_writers(cfg))
    found = LocalShards(cfg).search("semantic", _query(11, 2, "semantic"), 50, videos=[12, 13])
    assert {h.video_id for h in found[0]} == {12, 13}
    assert len(found[0]) == 16


def test_frames_of_a_stretch_of_a_video(cfg: Config) -> None:
    _fill(_writers(cfg))
    times, vectors = LocalShards(cfg).frames("visual", 13, 2.0, 5.0)
    assert times.tolist() == [[2, 3], [3, 4], [4, 5]]
    assert np.allclose(vectors, make_batch(13, 8, seed=13).space("visual")[2:5], atol=1e-6)


def test_loading_and_searching_write_nothing(cfg: Config) -> None:
    writers = _writers(cfg)
    _fill(writers)
    writers[0].snapshot()
    before = _files(cfg.data_dir)
    local = LocalShards(cfg)
    local.search("visual", _query(10, 1), 5)
    local.frames("semantic", 10, 0, 3)
    assert _files(cfg.data_dir) == before


def test_a_log_being_appended_to_is_read_to_its_last_whole_record_and_left_as_it_is(
    cfg: Config,
) -> None:
    writers = _writers(cfg)
    _fill(writers, videos=(10,))
    log = sorted((shard_dir(cfg.data_dir, 0) / "wal").glob("*.log"))[-1]
    whole = log.read_bytes()
    # Half of the next record, as a reader sees it while the writer is still writing it.
    writers[0].add(make_batch(12, 8, seed=12))
    torn = log.read_bytes()[: len(whole) + (len(log.read_bytes()) - len(whole)) // 2]
    log.write_bytes(torn)
    before = _files(cfg.data_dir)
    found = LocalShards(cfg).search("visual", _query(12, 4), 5)
    assert {h.video_id for h in found[0]} == {10}  # the torn record is where the log ends
    assert _files(cfg.data_dir) == before  # not cut off: the writer's to finish


def test_a_later_load_sees_what_the_writer_added_meanwhile(cfg: Config) -> None:
    writers = _writers(cfg)
    _fill(writers, videos=(10,))
    assert {h.video_id for h in LocalShards(cfg).search("visual", _query(12, 0), 3)[0]} == {10}
    _fill(writers, videos=(12,))  # the same writer, still open
    assert LocalShards(cfg).search("visual", _query(12, 0), 3)[0][0].video_id == 12


def test_an_empty_data_dir_holds_nothing_and_is_not_made(cfg: Config) -> None:
    found = LocalShards(cfg).search("visual", _query(10, 0), 5)
    assert found == [[]] and found.missing == ()
    assert not cfg.data_dir.exists()


def test_a_data_dir_built_with_another_shard_count_is_refused(cfg: Config) -> None:
    _fill(_writers(cfg))
    with pytest.raises(ValueError, match="built with 2 shards"):
        LocalShards(cfg.model_copy(update={"num_shards": 3}))


def test_the_same_answers_as_the_shard_actors(ray_session, cfg: Config) -> None:
    from vifusion.index.router import ShardSet

    writers = _writers(cfg)
    _fill(writers)
    for w in writers:
        w.snapshot()
    del writers
    shards = ShardSet(cfg)
    try:
        q = np.concatenate([_query(10, 1), _query(13, 6)])
        there = shards.search("visual", q, 12)
        here = LocalShards(cfg).search("visual", q, 12)
        assert [[(h.video_id, h.row) for h in hits] for hits in here] == [
            [(h.video_id, h.row) for h in hits] for hits in there
        ]
        assert np.allclose(
            [h.score for hits in here for h in hits],
            [h.score for hits in there for h in hits],
            atol=1e-6,
        )
    finally:
        shards.close()
