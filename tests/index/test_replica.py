"""Shard replicas: under faults (real Ray actors killed while writes and searches run), and
what they tell senders."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from vifusion.comm.codec import Ladder
from vifusion.comm.message import WireBatch
from vifusion.config import Config
from vifusion.index.replica import ShardReplica
from vifusion.index.router import ShardSet
from vifusion.types import VISUAL_DIM

from ._helpers import make_batch, unit


def _wait_alive(ray, handle, timeout_s: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get(handle.stats.remote(), timeout=5)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_primary_killed_mid_ingest_keeps_every_acknowledged_frame_once(
    ray_session, tmp_path: Path
) -> None:
    ray = ray_session
    shards = ShardSet(Config(data_dir=tmp_path, num_shards=1, faiss_threads=1))
    try:
        primary = shards.handles[0]
        batches = [make_batch(v, 12, seed=v) for v in range(1, 41)]
        refs = [primary.add.remote(b) for b in batches]
        ray.get(refs[:5])  # some adds acknowledged, the rest queued or in flight
        ray.kill(primary, no_restart=False)
        ray.get(refs)  # Ray restarts the shard from its log and retries what was not answered
        stats = ray.get(primary.stats.remote())
        assert stats["vectors"] == {
            "visual": 40 * 12,
            "semantic": 40 * 12,
            "speech": 0,
            "screen": 0,
        }  # none twice
        q = np.concatenate([b.space("semantic") for b in batches])
        got = shards.search("semantic", q, 1)
        want = [(v, float(f)) for v in range(1, 41) for f in range(12)]
        assert [(hits[0].video_id, hits[0].t_start) for hits in got] == want
    finally:
        shards.close()


@pytest.mark.slow
@pytest.mark.parametrize("victim", [1, 0], ids=["follower", "primary"])
def test_searches_keep_answering_while_a_replica_dies_and_it_comes_back_whole(
    ray_session, tmp_path: Path, victim: int
) -> None:
    ray = ray_session
    shards = ShardSet(Config(data_dir=tmp_path, num_shards=2, shard_replicas=2, faiss_threads=1))
    try:
        ray.get([shards.handle_for(v).add.remote(make_batch(v, 10, seed=v)) for v in range(1, 9)])
        queries = unit(np.random.default_rng(5), 8, 384)
        expected = shards.search("semantic", queries, 5)
        errors: list[BaseException] = []
        answers = [0]
        stop = threading.Event()

        def load() -> None:
            while not stop.is_set():
                try:
                    assert shards.search("semantic", queries, 5) == expected
                    answers[0] += 1
                except BaseException as e:  # noqa: BLE001 - any failure is the finding
                    errors.append(e)
                    return

        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        while answers[0] < 20:
            time.sleep(0.01)
        dead = shards.replicas[0][victim]
        ray.kill(dead, no_restart=False)
        seen = answers[0]
        while answers[0] < seen + 200 and not errors:
            time.sleep(0.01)
        stop.set()
        for t in threads:
            t.join()
        assert not errors, errors[0]
        # A write while a replica may still be down reaches it once it is back.
        late = make_batch(2, 3, seed=77, first_frame=50)
        ray.get(shards.handle_for(2).add.remote(late))
        back = _wait_alive(ray, dead)
        other = ray.get(shards.replicas[0][1 - victim].stats.remote())
        assert back["primary"] == (victim == 0)
        assert (back["vectors"], back["seq"]) == (other["vectors"], other["seq"])
        hits = ray.get(dead.search.remote("visual", late.space("visual"), 1, None))
        assert hits[1][:, 0].tolist() == late.ids.tolist()
    finally:
        shards.close()


def test_a_shard_with_no_live_replica_makes_searches_partial_not_failed(
    ray_session, tmp_path: Path
) -> None:
    """One replica per shard, and shard 0's is gone for good (its node lost, say): searches
    answer from shard 1 and name shard 0 as missing, at once, every time."""
    ray = ray_session
    shards = ShardSet(
        Config(data_dir=tmp_path, num_shards=2, faiss_threads=1, search_shard_timeout_s=5.0)
    )
    try:
        ray.get(
            [shards.handle_for(v).add.remote(make_batch(v, 10, seed=v)) for v in (2, 3)]
        )  # shards 0, 1
        query = make_batch(2, 10, seed=2).space("visual")[:1]  # video 2's first frame
        whole = shards.search("visual", query, 5)
        assert whole.missing == () and whole[0][0].video_id == 2
        dead = shards.handles[0]
        ray.kill(dead, no_restart=True)
        deadline = time.monotonic() + 30
        while True:  # the kill is asynchronous: wait until it has landed
            try:
                ray.get(dead.stats.remote(), timeout=5)
            except ray.exceptions.RayActorError:
                break
            except ray.exceptions.GetTimeoutError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for _ in range(5):
            found = shards.search("visual", query, 5)  # never raises
            assert found.missing == (0,)
            assert {h.video_id for h in found[0]} == {3}  # what shard 1 holds, nothing invented
        # a search that names only the lost shard's videos is partial and empty, not an error
        only = shards.search("visual", query, 5, videos=[2])
        assert only.missing == (0,) and only[0] == []
    finally:
        shards.close()


def test_searches_count_in_the_busy_time_senders_subtract(tmp_path: Path) -> None:
    """A shard serves one call at a time: a write's round trip that waited behind a search
    waited at the shard, not on the link, and the busy total that acknowledgements carry
    (``LinkMonitor``) must say so, or a shard busy with searches looks like congestion."""
    replica = ShardReplica(0, tmp_path, Config(data_dir=tmp_path, faiss_threads=1), followers=[])
    replica.add(make_batch(1, 200))
    before = replica.ping()[3]
    replica.search("visual", unit(np.random.default_rng(0), 64, VISUAL_DIM), 10)
    after_search = replica.ping()[3]
    assert after_search > before
    batch = make_batch(2, 10)
    wire = WireBatch(
        batch.ids, batch.times, Ladder().codecs[0].encode(batch.features), batch.batch_id
    )
    _, service_s, fixed_s, busy_s = replica.receive(wire)
    assert busy_s == pytest.approx(after_search + service_s)
    # by actor call, one at a time, each batch waits for its own log sync: a cost of every
    # message the sender sizes its batches against (with the CPU applying it), outside the
    # busy time
    assert fixed_s > replica.shard.last_sync_s > 0
