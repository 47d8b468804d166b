"""The shard stream: batches over TCP to a real shard replica, and what it refuses."""

import errno
import socket
import threading
import time

import numpy as np
import pytest
import ray

from tests.comm._proxy import Proxy, read_to_close
from tests.index._helpers import make_batch
from vifusion._files import StorageError
from vifusion.comm import Transport, WireBatch, wire
from vifusion.comm.codec import Ladder
from vifusion.comm.stream import ShardStream, StreamLost, StreamServer
from vifusion.config import Config
from vifusion.index.replica import ShardReplica


def encoded(batch) -> WireBatch:
    return WireBatch(
        batch.ids, batch.times, Ladder().get("fp32").encode(batch.features), batch.batch_id
    )


@pytest.fixture
def replica(ray_session, tmp_path):
    # as the router starts a primary: Ray restarts it from its log and retries the calls sent meanwhile
    handle = (
        ray.remote(ShardReplica)
        .options(max_restarts=-1, max_task_retries=-1)
        .remote(0, tmp_path / "s0", Config(faiss_threads=1), [])
    )
    yield handle
    ray.kill(handle)


def test_batches_on_the_stream_are_stored_in_order_and_acknowledged(replica):
    address, secret = ray.get(replica.stream_address.remote())
    stream = ShardStream(address, secret)
    batches = [make_batch(5, 30, seed=i, first_frame=30 * i) for i in range(4)]
    acks = [f.result(30) for f in [stream.send(encoded(b)) for b in batches]]
    assert [n for n, *_ in acks] == [30, 60, 90, 120]  # the vectors held after each: in order
    assert all(service > 0 and busy >= service and cost > 0 for _, service, cost, busy in acks)
    held = ray.get(replica.frames.remote("visual", 5, 0, 1000))[1]
    assert np.array_equal(held, np.concatenate([b.features[:, : held.shape[1]] for b in batches]))
    assert stream.ping().result(30)[0] == 0
    stream.close()


def test_a_wrong_secret_is_refused_and_sends_nothing(replica):
    (host, port), secret = ray.get(replica.stream_address.remote())
    wrong = bytes([secret[0] ^ 1]) + secret[1:]
    with pytest.raises(ConnectionError):
        wire.open_connection(socket.AF_INET, (host, port), wrong, timeout=10)
    stream = ShardStream((host, port), wrong)
    with pytest.raises(StreamLost, match="secret was refused"):
        stream.send(encoded(make_batch(6, 3))).result(30)
    assert stream.closed
    assert ray.get(replica.video_ids.remote()) == []


def test_a_malformed_batch_fails_alone_and_the_stream_goes_on(replica):
    stream = ShardStream(*ray.get(replica.stream_address.remote()))
    bad = encoded(make_batch(7, 2))
    bad.ids = bad.ids[:1]
    with pytest.raises(ValueError, match=r"ids \(1,\)"):
        stream.send(bad).result(30)
    assert stream.send(encoded(make_batch(8, 2))).result(30)[0] == 2
    assert ray.get(replica.video_ids.remote()) == [8]


def test_a_request_announcing_too_much_closes_the_connection(replica):
    (host, port), secret = ray.get(replica.stream_address.remote())
    channel = wire.open_connection(socket.AF_INET, (host, port), secret, timeout=10)
    # a batch of two arrays, the second announcing 2**40 float32s: never allocated
    channel.send(
        [
            b"VFS1"
            + bytes([0])
            + (1).to_bytes(4, "little")
            + bytes([2, 4, 0])
            + (0).to_bytes(2, "little")
            + b"fp32"
            + b"<i8\0"
            + bytes([1])
            + (1).to_bytes(8, "little")
            + b"<f4\0"
            + bytes([1])
            + (1 << 40).to_bytes(8, "little")
        ]
    )
    channel.conn.settimeout(10)
    assert read_to_close(channel.conn) == b""  # closed, no reply
    channel.close()
    assert not any(ray.get(replica.stats.remote())["vectors"].values())  # in no space


def recording_server() -> tuple[StreamServer, list[str]]:
    """A stream server whose shard only notes the batch ids it applies, in order."""
    staged: list[str] = []

    def stage(batch):
        staged.append(batch.batch_id)
        n = len(staged)
        return lambda: (n, 0.001, 0.001, 0.001)

    return StreamServer(stage, lambda: (0, 0.0, 0.0, 0.0), "127.0.0.1"), staged


HANDSHAKE = wire.NONCE_BYTES + wire.PROOF_BYTES  # what each end writes before its first message


def test_a_recorded_connection_replayed_is_refused_and_applies_nothing():
    server, staged = recording_server()
    proxy = Proxy(socket.AF_INET, server.address)
    stream = ShardStream(proxy.address, server.secret)
    batch = encoded(make_batch(20, 3))
    assert stream.send(batch).result(30)[0] == 1
    stream.close()
    with socket.create_connection(server.address, timeout=30) as s:  # all the client wrote, again
        s.sendall(proxy.sent[0])
        read_to_close(s)  # the server's new nonce makes the recorded proof worthless
    assert staged == [batch.batch_id]
    proxy.close()
    server.close()


def test_a_batch_altered_on_the_way_is_refused_and_never_applied():
    server, staged = recording_server()
    proxy = Proxy(
        socket.AF_INET, server.address, flip_up=HANDSHAKE + 50_000
    )  # a byte of the features
    stream = ShardStream(proxy.address, server.secret)
    with pytest.raises(StreamLost, match="shard closed the stream"):
        stream.send(encoded(make_batch(21, 30))).result(
            30
        )  # the transport sends it again by actor call
    assert stream.closed
    assert staged == []
    proxy.close()
    server.close()


def test_an_acknowledgement_altered_on_the_way_is_not_believed():
    """A man in the middle cannot acknowledge a batch for the shard: the batch fails as
    lost (the transport sends it again by actor call; the shard ignores a batch id it has seen)."""
    server, staged = recording_server()
    proxy = Proxy(
        socket.AF_INET, server.address, flip_down=HANDSHAKE + 1
    )  # the vectors held, in the first ack
    stream = ShardStream(proxy.address, server.secret)
    batch = encoded(make_batch(22, 3))
    with pytest.raises(StreamLost, match="failed its authentication"):
        stream.send(batch).result(30)
    assert stream.closed
    assert staged == [batch.batch_id]
    proxy.close()
    server.close()


def _header(rows: int, shapes: list[tuple[str, tuple[int, ...]]], batch_id: bytes = b"x") -> bytes:
    """A batch request's header as the stream writes it: the sizes it announces."""
    head = b"VFS1" + bytes([0]) + rows.to_bytes(4, "little") + bytes([len(shapes), 4, 0])
    specs = b"".join(
        dtype.encode().ljust(4, b"\0")
        + bytes([len(shape)])
        + b"".join(d.to_bytes(8, "little") for d in shape)
        for dtype, shape in shapes
    )
    return head + len(batch_id).to_bytes(2, "little") + b"fp32" + batch_id + specs


def test_a_header_whose_sizes_overflow_is_refused_before_allocating(monkeypatch, caplog):
    """(2**32, 2**32) bytes multiply to 0 in numpy's int64: the size cap passed and the shard
    tried to allocate 16 EiB. Sizes are exact integers, checked before anything is allocated:
    the connection closes with a clear log line, and the next connection's batch goes in."""
    crashed = []
    monkeypatch.setattr(threading, "excepthook", crashed.append)
    server, staged = recording_server()
    channel = wire.open_connection(socket.AF_INET, server.address, server.secret, timeout=10)
    with caplog.at_level("WARNING", logger="vifusion.comm.stream"):
        channel.send([_header(2, [("<i8", (2,)), ("<i1", (1 << 32, 1 << 32))])])
        channel.conn.settimeout(10)
        assert read_to_close(channel.conn) == b""  # closed, no reply
    channel.close()
    assert "(4294967296, 4294967296)" in caplog.text and "refused" in caplog.text
    stream = ShardStream(server.address, server.secret)
    batch = encoded(make_batch(23, 3))
    assert stream.send(batch).result(30)[0] == 1
    assert staged == [batch.batch_id]
    assert crashed == []  # no exception escaped the connection's thread
    stream.close()
    server.close()


def test_a_header_altered_on_the_way_is_refused_before_its_sizes_are_believed(caplog):
    """A man in the middle who makes a header announce more rows would have the shard
    allocate them (up to the message cap) before the message's tag is read: the header
    carries a tag of its own, checked first."""
    server, staged = recording_server()
    batch = encoded(make_batch(24, 30))
    # the second byte of the features' row count (30 -> 286 rows): past the header's fields,
    # the codec name and the batch id, the specs of ids (13 bytes) and times (21), the
    # features' dtype and ndim (5)
    at = HANDSHAKE + 14 + 4 + len(batch.batch_id) + 13 + 21 + 5 + 1
    proxy = Proxy(socket.AF_INET, server.address, flip_up=at)
    stream = ShardStream(proxy.address, server.secret)
    with caplog.at_level("WARNING", logger="vifusion.comm.wire"):
        with pytest.raises(StreamLost, match="shard closed the stream"):
            stream.send(batch).result(10)  # before: the shard waited for 256 rows never sent
    assert "message 0 on this connection failed its authentication" in caplog.text
    assert staged == []
    proxy.close()
    server.close()


def test_an_acknowledgement_announcing_a_long_text_is_not_read(ray_session):
    """The sender reads an acknowledgement's text before its tag: one altered to announce
    16 MiB more of it closes the stream, nothing allocated for it."""
    server, staged = recording_server()
    # the high byte of the text's length in the first acknowledgement (status, 4 numbers, length)
    proxy = Proxy(socket.AF_INET, server.address, flip_down=HANDSHAKE + 36)
    stream = ShardStream(proxy.address, server.secret)
    batch = encoded(make_batch(25, 3))
    with pytest.raises(StreamLost, match="announced"):
        stream.send(batch).result(10)  # before: it waited for 16 MiB never sent
    assert staged == [batch.batch_id]
    proxy.close()
    server.close()


def test_a_full_disk_reaches_the_sender_as_a_storage_error(ray_session):
    def receive(batch):
        raise OSError(errno.ENOSPC, "No space left on device")

    server = StreamServer(receive, lambda: (0, 0.0, 0.0, 0.0), "127.0.0.1")
    stream = ShardStream(server.address, server.secret)
    with pytest.raises(StorageError, match="No space left") as e:
        stream.send(encoded(make_batch(9, 2))).result(30)
    assert e.value.reason == "full"
    stream.close()
    server.close()


def test_the_next_batch_is_applied_while_the_last_one_syncs_and_acks_keep_their_order():
    """The server stages batch N+1 while N commits (its log sync), and acknowledges each
    only once its commit returns, in the order sent."""
    staged, first_synced = [], threading.Event()

    def stage(batch):
        staged.append(batch.batch_id)
        n = len(staged)

        def commit():
            if n == 1:
                assert first_synced.wait(30)
            return n, 0.001, 0.0, 0.001 * n

        return commit

    server = StreamServer(stage, lambda: (0, 0.0, 0.0, 0.0), "127.0.0.1")
    stream = ShardStream(server.address, server.secret)
    futures = [stream.send(encoded(make_batch(12, 2, seed=i, first_frame=2 * i))) for i in range(3)]
    deadline = time.monotonic() + 30
    while len(staged) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(staged) == 3  # all applied while the first one still syncs
    assert not any(f.done() for f in futures)  # and none acknowledged before it is durable
    first_synced.set()
    assert [f.result(30)[0] for f in futures] == [1, 2, 3]
    stream.close()
    server.close()


def test_a_replica_that_dies_under_the_stream_loses_nothing(replica):
    """Batches in flight when the primary dies go again by actor call, which Ray delivers to
    the restarted replica; the shard holds every row once, and the stream opens again."""
    t = Transport(stream=True)
    while not t.by_stream(0):
        t.probe(0, replica)
        t.poll(5.0)
    batches = [make_batch(10, 50, seed=i, first_frame=50 * i) for i in range(12)]
    deliveries = []
    for i, b in enumerate(batches):
        t.send(0, replica, b, backlog=True, tag=i)
        if i == 5:
            ray.kill(replica, no_restart=False)
    while t.in_flight(0):
        deliveries += t.poll(5.0)
    assert sorted((d.tag, d.error) for d in deliveries) == [(i, None) for i in range(12)]
    times, _ = ray.get(replica.frames.remote("visual", 10, 0, 1000))
    assert np.array_equal(times, np.concatenate([b.times for b in batches]))  # every row once
    deadline = time.monotonic() + 60
    while not t.by_stream(0) and time.monotonic() < deadline:  # the restarted replica's new port
        t.send(0, replica, make_batch(11, 1, seed=99), backlog=False)
        while t.in_flight(0):
            t.poll(5.0)
        time.sleep(0.5)
    assert t.by_stream(0)
    t.close()
