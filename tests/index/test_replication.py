"""Shard replicas each keep their own directory and get their data from one another over
Ray: a replica that comes back with nothing catches up from a live one, and a write is
acknowledged once the primary and ``shard_ack_replicas`` followers hold it."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from vifusion.config import Config
from vifusion.index._seal import Seal, data_dir_key
from vifusion.index.layout import replica_dir
from vifusion.index.router import ShardSet
from vifusion.index.shard import SNAPSHOT, WAL_DIR, Shard
from vifusion.index.wal import encode

from ._helpers import make_batch


def _cfg(tmp_path: Path, **kw) -> Config:
    # A small log threshold: every replica snapshots on its own as writes come, so catching
    # up moves a snapshot file as well as log records.
    return Config(
        data_dir=tmp_path, num_shards=1, faiss_threads=1, snapshot_log_bytes=64 << 10, **kw
    )


def _state(ray, handle, timeout_s: float = 60.0) -> tuple[int, dict]:
    """(seq, vectors) of a replica, once it answers (Ray may be restarting it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            s = ray.get(handle.stats.remote(), timeout=5)
            return s["seq"], s["vectors"]
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _caught_up(ray, handle, seq: int, timeout_s: float = 60.0) -> tuple[int, dict]:
    """A replica's state once it holds seq ``seq`` (or the time is up)."""
    deadline = time.monotonic() + timeout_s
    while (got := _state(ray, handle))[0] < seq and time.monotonic() < deadline:
        time.sleep(0.1)
    return got


def _top_ids(ray, handle, batches) -> list[int]:
    q = np.concatenate([b.space("visual") for b in batches])
    return ray.get(handle.search.remote("visual", q, 1, None))[1][:, 0].tolist()


def _ids(batches) -> list[int]:
    return [int(i) for b in batches for i in b.ids]


def test_each_replica_has_its_own_directory_holding_the_same_vectors(
    ray_session, tmp_path: Path
) -> None:
    ray = ray_session
    shards = ShardSet(_cfg(tmp_path, shard_replicas=2))
    try:
        batches = [make_batch(v, 20, seed=v) for v in range(1, 7)]
        ray.get([shards.handles[0].add.remote(b) for b in batches])
        primary, follower = shards.replicas[0]
        assert _state(ray, follower) == _state(ray, primary)  # acknowledged: on both
        assert _top_ids(ray, follower, batches) == _ids(batches)
        own = replica_dir(tmp_path, 0, 1)
        assert own != replica_dir(tmp_path, 0, 0)
        stats = ray.get([h.stats.remote() for h in (primary, follower)])
        assert [s["directory"] for s in stats] == [str(replica_dir(tmp_path, 0, r)) for r in (0, 1)]
        assert list(stats[0]["followers"].values()) == [stats[0]["seq"]]  # how far behind: not
        assert (own / SNAPSHOT).exists() and list((own / WAL_DIR).glob("*.log"))
    finally:
        shards.close()


def _flipped(payload: bytes) -> bytes:
    return payload[:-1] + bytes([payload[-1] ^ 1])  # one bit of the last feature


def test_a_follower_refuses_a_write_or_catch_up_changed_on_the_way(
    ray_session, tmp_path: Path
) -> None:
    """What replicas send each other carries a MAC under the data dir's key: one bit changed
    after sealing, or a record sealed under another key, is refused and nothing of it is
    logged (a CRC computed after the change would have passed)."""
    ray = ray_session
    shards = ShardSet(_cfg(tmp_path, shard_replicas=2))
    try:
        ray.get([shards.handles[0].add.remote(make_batch(v, 8, seed=v)) for v in (1, 2)])
        primary, follower = shards.replicas[0]
        before = _state(ray, follower)
        seq = before[0] + 1
        payload = encode(make_batch(3, 8, seed=3))
        seal = Seal(data_dir_key(tmp_path))
        for sent, tag in (
            (_flipped(payload), seal.record(seq, payload)),  # changed after sealing
            (payload, Seal(b"k" * 32).record(seq, payload)),  # not this data dir's key
            (payload, seal.record(seq + 1, payload)),  # sealed for another seq
        ):
            with pytest.raises(ray.exceptions.RayTaskError, match="MAC does not match"):
                ray.get(follower.apply.remote(seq, sent, tag))
        changes, snapshot, tag = ray.get(primary.changes_after.remote(0, None, True))
        assert snapshot or changes.records
        if snapshot:  # the snapshot file, changed on its way through the object store
            with pytest.raises(ray.exceptions.RayTaskError, match="not installed"):
                bad = [ray.put(_flipped(ray.get(snapshot[0])))]
                ray.get(follower.install.remote(changes, bad, tag))
        if changes.records:
            (seq0, first), *rest = changes.records
            bad = dataclasses.replace(changes, records=[(seq0, _flipped(first)), *rest])
            with pytest.raises(ray.exceptions.RayTaskError, match="not installed"):
                ray.get(follower.install.remote(bad, snapshot, tag))
        assert _state(ray, follower) == before == _state(ray, primary)
        assert ray.get(follower.install.remote(changes, snapshot, tag)) == before[0]  # as sent
    finally:
        shards.close()


@pytest.mark.slow
@pytest.mark.parametrize("victim", [1, 0], ids=["follower", "primary"])
def test_a_replica_that_loses_its_directory_comes_back_whole_from_the_other(
    ray_session, tmp_path: Path, victim: int
) -> None:
    """Its node lost, say: Ray starts it again with an empty directory. A follower gets
    everything from the primary; a primary from the follower (which holds every acknowledged
    write) before it takes a write, and the writes sent meanwhile wait, none lost."""
    ray = ray_session
    shards = ShardSet(_cfg(tmp_path, shard_replicas=2))
    try:
        first = [make_batch(v, 20, seed=v) for v in range(1, 7)]
        ray.get([shards.handles[0].add.remote(b) for b in first])
        dead, other = shards.replicas[0][victim], shards.replicas[0][1 - victim]
        shutil.rmtree(replica_dir(tmp_path, 0, victim))
        ray.kill(dead, no_restart=False)
        later = [make_batch(v, 5, seed=v) for v in (7, 8)]
        refs = [shards.handles[0].add.remote(b) for b in later]  # while it is down
        ray.get(refs)
        every = first + later
        want = _state(ray, other)
        assert want == (len(every), {"visual": 130, "semantic": 130, "speech": 0, "screen": 0})
        assert _caught_up(ray, dead, want[0]) == want
        assert _top_ids(ray, dead, every) == _ids(every)
        assert ray.get(dead.stats.remote())["primary"] == (victim == 0)
    finally:
        shards.close()


@contextmanager
def _stopped(ray, handle):
    """A replica's process frozen (SIGSTOP): alive to Ray, answering nothing."""
    pid = ray.get(handle.__ray_call__.remote(lambda self: os.getpid()))
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):  # killed meanwhile
            os.kill(pid, signal.SIGCONT)


@pytest.mark.slow
def test_a_write_is_acknowledged_once_on_the_primary_and_ack_replicas_followers(
    ray_session, tmp_path: Path
) -> None:
    ray = ray_session
    one = ShardSet(_cfg(tmp_path / "one", shard_replicas=3, shard_ack_replicas=1))
    two = ShardSet(_cfg(tmp_path / "two", shard_replicas=3, shard_ack_replicas=2))
    try:
        batch = make_batch(1, 10, seed=1)
        slow = one.replicas[0][2]
        with _stopped(ray, slow):
            # one follower of two answers: enough for shard_ack_replicas=1
            ray.get(one.handles[0].add.remote(batch), timeout=60)
        # the frozen one gets it in the background once it runs again
        want = _state(ray, one.handles[0])
        assert _caught_up(ray, slow, want[0]) == want
        with _stopped(ray, two.replicas[0][2]):
            ref = two.handles[0].add.remote(batch)
            # shard_ack_replicas=2: not acknowledged while a follower cannot log it
            assert ray.wait([ref], timeout=3)[0] == []
        ray.get(ref, timeout=60)
        assert [_state(ray, h) for h in two.replicas[0]] == [_state(ray, two.handles[0])] * 3
    finally:
        one.close()
        two.close()


def test_ack_replicas_default_to_one_follower_and_never_exceed_the_followers() -> None:
    assert Config(shard_replicas=1).ack_replicas == 0
    assert Config(shard_replicas=3).ack_replicas == 1
    assert Config(shard_replicas=3, shard_ack_replicas=2).ack_replicas == 2
    with pytest.raises(ValueError, match="shard_ack_replicas=3 must be at most shard_replicas - 1"):
        Config(shard_replicas=3, shard_ack_replicas=3)


@pytest.mark.slow
def test_a_follower_back_with_writes_the_primary_never_made_takes_the_primarys_instead(
    ray_session, tmp_path: Path
) -> None:
    """Its directory holds writes past any the primary made durable (a directory from an
    older history, on a node that came back): the follower drops them for the primary's
    state, and a later write with one of their seqs is held, not skipped as one it had."""
    ray = ray_session
    shards = ShardSet(_cfg(tmp_path, shard_replicas=2))
    try:
        first = [make_batch(v, 10, seed=v) for v in (1, 2, 3)]
        ray.get([shards.handles[0].add.remote(b) for b in first])
        follower = shards.replicas[0][1]
        with _stopped(ray, follower):  # its files written behind its back, then it dies
            behind_its_back = Shard(0, replica_dir(tmp_path, 0, 1), _cfg(tmp_path))
            for seq, v in ((4, 9), (5, 10)):
                assert behind_its_back.apply(seq, make_batch(v, 10, seed=v)) == seq
            ray.kill(follower, no_restart=False)
        later = make_batch(4, 10, seed=4)
        ray.get(shards.handles[0].add.remote(later))
        want = _state(ray, shards.handles[0])
        assert want[0] == 4 and _caught_up(ray, follower, 4) == want
        assert _top_ids(ray, follower, [*first, later]) == _ids([*first, later])
        assert ray.get(follower.video_ids.remote()) == [1, 2, 3, 4]
    finally:
        shards.close()


@pytest.mark.slow
def test_a_primary_back_on_an_older_directory_of_another_history_takes_the_followers(
    ray_session, tmp_path: Path
) -> None:
    """The primary's node comes back after another took over, its directory holding a write
    that never left it (seq 4), while the shard went on with another write at seq 4: the
    primary tells the histories apart by the record at seq 4 and takes the follower's."""
    ray = ray_session
    cfg = Config(data_dir=tmp_path, num_shards=1, faiss_threads=1, shard_replicas=2)
    shards = ShardSet(cfg)
    old = tmp_path / "old"
    try:
        first = [make_batch(v, 4, seed=v) for v in (1, 2, 3)]
        ray.get([shards.handles[0].add.remote(b) for b in first])
        primary, follower = shards.replicas[0]
        mine = replica_dir(tmp_path, 0, 0)
        with _stopped(ray, primary):  # its node lost, a write logged there and never sent
            shutil.copytree(mine, old)
            Shard(0, old, cfg).add(make_batch(9, 4, seed=9))
            shutil.rmtree(mine)
            ray.kill(primary, no_restart=False)
        later = [make_batch(v, 4, seed=v) for v in (4, 5)]  # seqs 4 and 5, on another node
        for b in later:
            ray.get(shards.handles[0].add.remote(b))
        with _stopped(ray, primary):  # that node lost too: back on the first, older directory
            shutil.rmtree(mine)
            shutil.copytree(old, mine)
            ray.kill(primary, no_restart=False)
        want = _state(ray, follower)
        assert want[0] == 5 and _state(ray, primary) == want
        assert ray.get(primary.video_ids.remote()) == [1, 2, 3, 4, 5]
        ray.get(shards.handles[0].add.remote(make_batch(6, 4, seed=6)))
        assert _caught_up(ray, follower, 6) == _state(ray, primary)
    finally:
        shards.close()


@pytest.mark.slow
def test_a_follower_back_empty_answers_no_search_until_it_has_caught_up(
    ray_session, tmp_path: Path
) -> None:
    """While it waits for the primary (frozen here, so the wait lasts), a follower that came
    back with nothing must not answer searches from its empty index: each answer is whole
    and right, or names the shard as missing."""
    ray = ray_session
    shards = ShardSet(_cfg(tmp_path, shard_replicas=2, search_shard_timeout_s=1.0))
    try:
        batches = [make_batch(v, 10, seed=v) for v in (1, 2, 3)]
        ray.get([shards.handles[0].add.remote(b) for b in batches])
        query = np.concatenate([b.space("visual") for b in batches])
        want = [(v, f) for v in (1, 2, 3) for f in range(10)]  # each frame finds itself
        primary, follower = shards.replicas[0]
        with _stopped(ray, primary):
            shutil.rmtree(replica_dir(tmp_path, 0, 1))
            ray.kill(follower, no_restart=False)
            _state(ray, follower)  # back, empty, waiting on the primary
            for _ in range(4):
                found = shards.search("visual", query, 1)
                assert found.missing == (0,) or [(h[0].video_id, h[0].row) for h in found] == want
        assert _caught_up(ray, follower, 3)[0] == 3
        for _ in range(4):
            found = shards.search("visual", query, 1)
            assert found.missing == () and [(h[0].video_id, h[0].row) for h in found] == want
    finally:
        shards.close()


@pytest.mark.slow
def test_a_follower_gone_for_good_fails_writes_until_another_takes_its_name(
    ray_session, tmp_path: Path
) -> None:
    """With its only follower killed for good, a write is on the primary alone: it is not
    acknowledged (an error says so). A ShardSet opened on the data dir starts a new
    follower under the name; it catches up and writes are acknowledged again."""
    ray = ray_session
    cfg = _cfg(tmp_path, shard_replicas=2)
    shards = ShardSet(cfg)
    try:
        ray.get(shards.handles[0].add.remote(make_batch(1, 10, seed=1)))
        ray.kill(shards.replicas[0][1], no_restart=True)
        with pytest.raises(RuntimeError, match="shard_ack_replicas=1"):
            ray.get(shards.handles[0].add.remote(make_batch(2, 10, seed=2)), timeout=60)
        again = ShardSet(cfg)  # attaches to the primary, starts a follower under the name
        try:
            successor = again.replicas[0][1]
            # The primary takes the successor up within a second (it polls for the name);
            # until then a write is refused as before, and sent again.
            deadline = time.monotonic() + 30
            while True:
                try:
                    ray.get(shards.handles[0].add.remote(make_batch(3, 10, seed=3)), timeout=60)
                    break
                except ray.exceptions.RayTaskError as e:
                    assert "live followers" in str(e) and time.monotonic() < deadline
                    time.sleep(0.5)
            want = _state(ray, shards.handles[0])
            assert (
                want[0] >= 3 and _caught_up(ray, successor, want[0]) == want
            )  # a refused try logs too
            assert ray.get(successor.video_ids.remote()) == [1, 2, 3]
        finally:
            again.close()
    finally:
        shards.close()
