"""A video shipped to an extractor on another node: nodes share no disk, so the extractor
decodes the bytes it got through Ray, never the path (which does not exist there)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import ray

from vifusion.config import Config
from vifusion.extract._spool import CHUNK_BYTES, received, ship
from vifusion.extract.decode import DecodeError
from vifusion.index import shard_for
from vifusion.runtime import Runtime
from vifusion.samples import write_video


@pytest.mark.slow
def test_an_extractor_indexes_a_shipped_file_it_cannot_open_itself(
    ray_session, tmp_path: Path
) -> None:
    video = write_video(tmp_path / "two.mp4", ("coffee", "rocket"))
    elsewhere = "/nonexistent-node-disk/uploads/two.mp4"  # the path on the pool's node
    cfg = Config(
        data_dir=tmp_path / "data",
        sample_fps=2.0,
        dedup_cosine=1.01,
        speech=False,
        screen_text=False,
    )
    with Runtime(cfg, writer=True) as rt:
        (extractor,) = rt.indexer.extractors
        shard = shard_for(7, cfg.num_shards)
        events = extractor.index_video.options(num_returns="streaming").remote(
            7, elsewhere, shard, True, ship(video.path)
        )
        last = [ray.get(ref) for ref in events][-1]
        assert last == {"event": "done", "frames": round(video.duration_s * 2)}
        times, _ = ray.get(rt.shards.handles[shard].frames.remote("visual", 7, 0, 1e9))
        assert len(times) == last["frames"]


def test_a_missing_file_is_a_clear_error_before_anything_is_shipped(ray_session, tmp_path) -> None:
    with pytest.raises(DecodeError, match="no such file"):
        ship(tmp_path / "gone.mp4")


def test_the_received_copy_is_whole_and_removed_after(ray_session, tmp_path: Path) -> None:
    data = bytes(range(256)) * ((CHUNK_BYTES + 1000) // 256)  # two chunks
    (tmp_path / "big.mp4").write_bytes(data)
    chunks = ship(tmp_path / "big.mp4")
    assert len(chunks) == 2
    with received(chunks, "../../big.mp4") as copy:
        assert copy.read_bytes() == data
        assert copy.parent.parent == Path(tempfile.gettempdir())  # the name cannot climb out
    assert not copy.parent.exists()
