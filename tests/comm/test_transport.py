"""The transport against real shard replicas (Ray actors writing real logs)."""

import threading
import time

import numpy as np
import pytest
import ray

from tests.index._helpers import make_batch, unit
from vifusion.comm import SharedTables, Transport
from vifusion.config import Config
from vifusion.index.replica import ShardReplica
from vifusion.types import SEMANTIC_DIM, FusedBatch


@pytest.fixture(scope="module")
def tables():
    rng = np.random.default_rng(0)
    rows = np.concatenate([make_batch(1, 600, seed=s).features for s in range(4)])
    rows += 0.01 * rng.standard_normal(rows.shape).astype(np.float32)
    return SharedTables.train(rows)


def shard(tmp_path):
    return ray.remote(ShardReplica).remote(0, tmp_path, Config(faiss_threads=1), [])  # the primary


def drain(t: Transport) -> list:
    out = []
    while t.in_flight(0):
        out += t.poll(5.0)
    return out


def transport(replica, stream: bool, tables=None, **options) -> Transport:
    """A transport to ``replica`` whose batches go on the shard stream (``stream``), or by actor call."""
    t = Transport(tables, stream=stream, **options)
    for _ in range(100):  # the replica's address arrives while probes go by actor call
        if t.by_stream(0) == stream:
            return t
        t.probe(0, replica)
        drain(t)
    raise AssertionError("the shard stream did not open")


@pytest.fixture(params=[True, False], ids=["stream", "actor-call"])
def stream(request) -> bool:
    return request.param


@pytest.mark.parametrize("codec", ["fp32", "fp16", "int8", "sparse", "pq"])
def test_every_codec_arrives_and_the_shard_stores_what_it_decodes(
    ray_session, tmp_path, tables, codec, stream
):
    """On the stream, a table codec's first batch comes back (the shard has no tables yet)
    and goes again by actor call, with them; by actor call, one small batch rides inline
    and one large goes through the object store."""
    replica = shard(tmp_path)
    t = transport(replica, stream, tables, fixed=codec)
    sent = [make_batch(7, 4, seed=1), make_batch(7, 60, seed=2, first_frame=4)]
    for b in sent:
        t.send(0, replica, b, backlog=False)
    deliveries = drain(t)
    # (in either order: on the stream, both may come back for the tables and go again at once)
    assert sorted((d.rows, d.codec, d.error) for d in deliveries) == [
        (4, codec, None),
        (60, codec, None),
    ]
    held = np.concatenate(
        [ray.get(replica.frames.remote(s, 7, 0, 100))[1] for s in ("visual", "semantic")], 1
    )
    features = np.concatenate([b.features for b in sent])
    expected = t.ladder.get(codec).decode(t.ladder.get(codec).encode(features))
    assert np.array_equal(held, expected)
    if codec == "fp32":
        assert np.array_equal(held, features)  # exact: bit-identical to no compression
    assert t.by_stream(0) == stream  # and it stays open
    ray.kill(replica)


def test_link_statistics_come_from_acknowledgements(ray_session, tmp_path):
    replica = shard(tmp_path)
    t = Transport(min_bytes=64 << 10)
    for seed in (8, 9):  # 26 kB alone: the path and (after the first call) the fixed cost
        t.send(0, replica, make_batch(3, 4, seed=seed), backlog=False)
        drain(t)
    assert t.stats(0).min_rtt > 0 and t.stats(0).per_message_s > 0
    for i in range(6):
        t.send(0, replica, make_batch(3, 20, seed=i, first_frame=20 * i), backlog=True)
    drain(t)
    s = t.stats(0)
    assert s.acked_messages == 8 and s.in_flight == 0
    assert s.acked_bytes == 2 * make_batch(3, 4).nbytes + sum(
        make_batch(3, 20, seed=i).nbytes for i in range(6)
    )
    assert s.delivery_rate > 0
    assert t.codec(0) == (0, "fp32")
    ray.kill(replica)


def test_acknowledgements_are_collected_while_another_thread_sends(ray_session, tmp_path):
    """The aggregator's pump sends while its other thread waits in ``poll``: a poll that
    began with nothing in flight returns the acknowledgement of a message sent meanwhile."""
    replica = shard(tmp_path)
    t = Transport()
    polled: list = []
    poller = threading.Thread(target=lambda: polled.extend(t.poll(60.0)))
    poller.start()
    time.sleep(0.2)  # let it begin waiting with nothing in flight
    t.send(0, replica, make_batch(4, 3), backlog=False, tag="sent while polling")
    poller.join()
    assert [(d.tag, d.error) for d in polled] == [("sent while polling", None)]
    assert ray.get(replica.video_ids.remote()) == [4]
    ray.kill(replica)


def test_a_refused_batch_fails_alone(ray_session, tmp_path, stream):
    replica = shard(tmp_path)
    t = transport(replica, stream)
    bad = make_batch(1, 2)
    bad.ids = bad.ids[:1]  # malformed: the shard refuses it
    t.send(0, replica, bad, backlog=False, tag="bad")
    t.send(0, replica, make_batch(2, 3), backlog=False, tag="good")
    outcomes = {d.tag: d.error for d in drain(t)}
    assert isinstance(outcomes["bad"], ValueError) and outcomes["good"] is None
    assert "ids (1,)" in str(outcomes["bad"])
    assert ray.get(replica.video_ids.remote()) == [2]
    ray.kill(replica)


@pytest.mark.parametrize("codec", ["sparse", "pq"])
def test_a_batch_with_text_rows_skips_the_table_codecs_trained_on_frames(
    ray_session, tmp_path, tables, codec
):
    """Sparse masks and pq codebooks fit frames; on text rows (a sentence embedding, zero
    visual columns) they kept only ~0.87 of recall@10. A batch holding any text row goes in
    int8 instead, whose error bound holds for any row; a batch of frames keeps the link's codec."""
    replica = shard(tmp_path)
    t = transport(replica, False, tables, fixed=codec)
    said = unit(np.random.default_rng(5), 8, SEMANTIC_DIM)
    spans = np.stack([np.arange(8) * 3.0, np.arange(8) * 3.0 + 2], axis=1)
    mixed = FusedBatch.concat(
        [make_batch(7, 10, seed=1), FusedBatch.of_texts(7, "speech", 0, spans, said)]
    )
    t.send(0, replica, mixed, backlog=False, tag="mixed")
    t.send(0, replica, make_batch(7, 10, seed=2, first_frame=10), backlog=False, tag="frames")
    assert {d.tag: (d.codec, d.error) for d in drain(t)} == {
        "mixed": ("int8", None),
        "frames": (codec, None),
    }
    times, held = ray.get(replica.frames.remote("speech", 7, 0, 100))
    np.testing.assert_array_equal(times, spans)
    assert (np.sum(held * said, axis=1) > 0.999).all()
    ray.kill(replica)
