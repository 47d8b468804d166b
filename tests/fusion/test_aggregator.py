"""The node aggregator as a real Ray actor in front of real shard replicas."""

import errno
import json
import threading
import time

import numpy as np
import pytest
import ray

from tests.fusion._frames import frames, join, rows
from vifusion._files import StorageError
from vifusion.config import Config
from vifusion.fusion import Aggregator
from vifusion.fusion.aggregator import start_aggregators
from vifusion.index.replica import ShardReplica
from vifusion.runtime import with_applied_plan
from vifusion.types import FusedBatch, video_of


@pytest.fixture
def shards(ray_session, tmp_path):
    cfg = Config(faiss_threads=1)
    replicas = [ray.remote(ShardReplica).remote(n, tmp_path / f"s{n}", cfg, []) for n in range(2)]
    yield replicas
    for r in replicas:
        ray.kill(r)


def aggregator(tmp_path, shards, **cfg):
    cfg = Config(data_dir=tmp_path, compression="off", **cfg)
    return ray.remote(Aggregator).options(max_concurrency=16).remote(cfg, shards)


def test_streams_of_several_extractors_arrive_exactly_once(tmp_path, shards):
    agg = aggregator(tmp_path, shards, dedup_cosine=1.01)
    videos = {v: frames(v, 50) for v in range(10, 16)}

    def extractor(v: int) -> None:  # like an extractor: hand over 16 frames at a time, then finish
        for i in range(0, 50, 16):
            ray.get(agg.submit.remote(v % 2, videos[v].rows(slice(i, i + 16))))
        assert ray.get(agg.finish.remote(v))[0] == 50

    threads = [threading.Thread(target=extractor, args=(v,)) for v in videos]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for v, src in videos.items():
        held = ray.get(shards[v % 2].frames.remote("visual", v, 0, 1000))[1]
        assert np.array_equal(held, src.space("visual"))
    stats = ray.get(agg.stats.remote())
    assert stats["rows_in"] == stats["rows_out"] == 300
    # fused: far fewer transfers than frames (the least batch, 64 KiB, holds about 10; what
    # comes in while the link is idle leaves at once, in parts, so some carry fewer)
    assert stats["batches"] < 300 / 5
    assert stats["codec_rows"] == {"fp32": 300}
    assert stats["latency_p50_s"] > 0
    assert set(stats["links"]) == {0, 1}


def test_a_planned_codec_floor_compresses_its_nodes_rows_from_the_first(tmp_path, shards):
    """An applied plan that sets the head's codec floor to int8: its aggregator sends every row
    in int8 on a link with no congestion at all, and the shard holds them within int8's error."""
    head = {"name": "head-0", "head": True, "extractors": 1, "codec_floor": "int8"}
    plan = {"nodes": [head], "shards": [["head-0"], ["head-0"]]}
    plan |= {"fusion_min_bytes": 64 << 10, "fusion_max_bytes": 1 << 20}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    cfg = with_applied_plan(Config(data_dir=tmp_path, dedup_cosine=1.01))  # as a runtime starts
    (tmp_path / "plan.json").unlink()  # the stage places by the plan handed down, not the file
    (agg,) = start_aggregators(cfg, shards).values()
    try:
        src = frames(7, 40)
        ray.get(agg.submit.remote(1, src.rows(slice(0, 40))))
        assert ray.get(agg.finish.remote(7))[0] == 40
        assert ray.get(agg.stats.remote())["codec_rows"] == {"int8": 40}
        held = ray.get(shards[1].frames.remote("visual", 7, 0, 1000))[1]
        assert held.shape == src.space("visual").shape
        assert np.abs(held - src.space("visual")).max() < 0.02
    finally:
        ray.kill(agg)


def test_near_duplicates_cross_the_link_as_one_vector(tmp_path, shards):
    agg = aggregator(tmp_path, shards, dedup_cosine=0.98)
    still = frames(20, 1)
    run = rows(20, np.repeat(still.space("visual"), 8, 0), np.repeat(still.space("semantic"), 8, 0))
    ray.get(agg.submit.remote(0, join(run, frames(20, 2, start=8))))
    assert ray.get(agg.finish.remote(20))[0] == 3
    times, _ = ray.get(shards[0].frames.remote("visual", 20, 0, 100))
    assert times.tolist() == [[0, 8], [8, 9], [9, 10]]


def test_a_refused_video_fails_alone_with_the_reason(tmp_path, shards):
    agg = aggregator(tmp_path, shards, dedup_cosine=1.01)
    good = frames(30, 3)
    bad = FusedBatch(
        good.ids, good.times, np.ascontiguousarray(good.features[:, :5])
    )  # wrong width
    ray.get(agg.submit.remote(0, frames(32, 3)))
    with pytest.raises(
        ray.exceptions.RayTaskError,
        match=r"float32 features \(3, 1664\); got \(3, 2\) and float32 \(3, 5\)",
    ):
        ray.get(agg.submit.remote(0, bad))
    assert ray.get(agg.finish.remote(32))[0] == 3
    ray.get(agg.abandon.remote(30))
    assert 32 in ray.get(shards[0].video_ids.remote())


class _SlowFor(ShardReplica):
    """A real shard that takes 2 s over each write holding a frame of video 40."""

    def receive(self, wire):
        if (video_of(wire.ids) == 40).any():
            time.sleep(2.0)
        return super().receive(wire)


def _in_flight(agg, dest: int) -> int:
    return ray.get(agg.stats.remote())["links"].get(dest, {}).get("in_flight", 0)


def test_on_an_idle_link_rows_leave_without_waiting_for_a_batch(tmp_path, shards):
    agg = aggregator(
        tmp_path, shards, dedup_cosine=1.01, fusion_latency_target_s=60.0
    )  # age limit 15 s
    src = frames(45, 3)
    ray.get(agg.submit.remote(0, src))  # far less than a batch, and nothing in flight
    deadline = time.monotonic() + 10
    while (
        ray.get(shards[0].stats.remote())["vectors"]["visual"] < 3 and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    # in the shard before finish() and long before their age is up
    assert np.array_equal(
        ray.get(shards[0].frames.remote("visual", 45, 0, 100))[1], src.space("visual")
    )


def test_abandon_drops_what_waits(ray_session, tmp_path):
    shard = ray.remote(_SlowFor).remote(0, tmp_path / "s0", Config(faiss_threads=1), [])
    # by actor call, where the shard is slow (the shard stream would skip it)
    agg = aggregator(
        tmp_path, [shard], dedup_cosine=1.01, fusion_latency_target_s=60.0, fusion_stream=False
    )
    ray.get(agg.submit.remote(0, frames(40, 2)))  # leaves at once, 2 s at the shard
    deadline = time.monotonic() + 10
    while not _in_flight(agg, 0) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _in_flight(agg, 0) == 1
    ray.get(agg.submit.remote(0, frames(41, 5)))  # waits: the link is busy, the batch not full
    ray.get(agg.abandon.remote(41))
    ray.get(agg.submit.remote(0, frames(43, 2)))
    assert ray.get(agg.finish.remote(43))[0] == 2
    assert ray.get(agg.finish.remote(40))[0] == 2
    assert sorted(ray.get(shard.video_ids.remote())) == [40, 43]
    ray.kill(shard)


def test_with_fusion_off_every_frame_is_its_own_message(tmp_path, shards):
    agg = aggregator(tmp_path, shards, fusion=False)
    still = frames(50, 1)  # near-duplicates too stay apart: dedup is part of fusion
    ray.get(
        agg.submit.remote(
            0,
            rows(
                50, np.repeat(still.space("visual"), 6, 0), np.repeat(still.space("semantic"), 6, 0)
            ),
        )
    )
    assert ray.get(agg.finish.remote(50))[0] == 6
    stats = ray.get(agg.stats.remote())
    assert stats["batches"] == stats["rows_out"] == 6


class _RefusesOneWrite(ShardReplica):
    """A real shard whose disk refuses the first write of frame 1 while the first write of
    frame 0 is slow (a failure that arrives with another send of the video in flight); the
    write of frame 2 is slower still."""

    seen: set

    def receive(self, wire):
        self.seen = getattr(self, "seen", set())
        for frame in {int(i) & ((1 << 24) - 1) for i in wire.ids}:
            first = frame not in self.seen
            self.seen.add(frame)
            if frame == 0 and first:
                time.sleep(1.0)
            if frame == 1 and first:
                raise OSError(errno.ENOSPC, "No space left on device")
            if frame == 2:
                time.sleep(2.0)
        return super().receive(wire)


def test_a_late_ack_after_a_failed_send_does_not_count_for_the_next_run(ray_session, tmp_path):
    shard = (
        ray.remote(_RefusesOneWrite)
        .options(max_concurrency=4)
        .remote(0, tmp_path / "s0", Config(), [])
    )
    # one message per frame, both in flight at once; by actor call, where the refusal is
    # (the shard stream would skip it, once the replica's address came back)
    agg = aggregator(tmp_path, [shard], fusion=False, fusion_stream=False)
    ray.get(agg.submit.remote(0, frames(60, 2)))
    with pytest.raises(StorageError):  # the driver waits for room instead of failing the video
        ray.get(agg.finish.remote(60))
    ray.get(agg.abandon.remote(60), timeout=30)  # waits for frame 0's slow acknowledgement
    ray.get(agg.submit.remote(0, frames(60, 3)))  # the video's next run
    assert ray.get(agg.finish.remote(60), timeout=30)[0] == 3
    # finish returned once every row was acknowledged, the slow frame 2 too
    assert len(ray.get(shard.frames.remote("visual", 60, 0, 100))[0]) == 3
    ray.kill(shard)


def test_speech_and_screen_text_rows_travel_with_the_frames_to_the_videos_shard(tmp_path, shards):
    """Text rows handed over beside a video's frames (another extractor, interleaved) reach
    the video's shard exactly, in their own spaces; the frames' still scene still merges.
    (A run is closed after a quarter of the latency target: a long one here, so that a
    loaded machine's gaps between hand-overs do not end the scene.)"""
    agg = aggregator(tmp_path, shards, dedup_cosine=0.98, fusion_latency_target_s=60.0)
    still = frames(21, 1)
    run = rows(21, np.repeat(still.space("visual"), 6, 0), np.repeat(still.space("semantic"), 6, 0))
    rng = np.random.default_rng(3)
    said = rng.standard_normal((4, 384)).astype(np.float32)
    said /= np.linalg.norm(said, axis=1, keepdims=True)
    speech = FusedBatch.of_texts(21, "speech", 0, [[0, 1.5], [1.5, 3], [3, 4.5], [4.5, 6]], said)
    screen = FusedBatch.of_texts(21, "screen", 0, [[0, 6]], said[:1])
    handed = (
        run.rows(slice(0, 3)),
        speech.rows(slice(0, 2)),
        run.rows(slice(3, 6)),
        speech.rows(slice(2, 4)),
        screen,
    )
    for part in handed:
        ray.get(agg.submit.remote(1, part))
    assert ray.get(agg.finish.remote(21))[0] == 1 + 4 + 1
    times, held = ray.get(shards[1].frames.remote("speech", 21, 0, 100))
    assert times.tolist() == speech.times.tolist() and np.array_equal(held, said)
    assert ray.get(shards[1].frames.remote("screen", 21, 0, 100))[0].tolist() == [[0, 6]]
    assert ray.get(shards[1].frames.remote("visual", 21, 0, 100))[0].tolist() == [[0, 6]]
    assert ray.get(shards[0].video_ids.remote()) == []


def test_the_tables_it_trains_keep_the_configured_sparse_share(tmp_path, shards):
    """codec_sparse_keep reaches the sparse codec: the tables trained from the rows passing
    (and saved for the next start) keep that share of each space's dims."""
    from vifusion.comm import Ladder, SharedTables

    cfg = Config(
        data_dir=tmp_path, dedup_cosine=1.01, codec_train_rows=320, codec_sparse_keep=(0.25, 0.5)
    )
    agg = ray.remote(Aggregator).options(max_concurrency=16).remote(cfg, shards)
    ray.get(agg.submit.remote(0, frames(30, 320)))
    assert ray.get(agg.finish.remote(30))[0] == 320
    deadline = time.monotonic() + 120
    while (
        not (found := sorted((tmp_path / "codec").glob("tables-*.npz")))
        and time.monotonic() < deadline
    ):
        time.sleep(0.2)
    tables = SharedTables.load(found[0])
    assert [len(m) for m in tables.masks] == [320, 192]  # 0.25 x 1280, 0.5 x 384
    assert Ladder(tables).get("sparse").bytes_per_row == 320 + 192 + 8
    ray.kill(agg)
