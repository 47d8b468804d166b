"""An extractor's hand-over to a real node aggregator actor through its local socket."""

import os
import socket
import struct
import threading
import time

import numpy as np
import pytest
import ray

from tests.comm._proxy import Proxy, read_to_close
from tests.fusion._frames import frames
from vifusion.comm import wire
from vifusion.config import Config
from vifusion.fusion import Aggregator, AggregatorLost, Handoff
from vifusion.fusion.handoff import MAX_ROWS, HandoffServer
from vifusion.index.replica import ShardReplica
from vifusion.types import FusedBatch


@pytest.fixture
def shard(ray_session, tmp_path):
    replica = ray.remote(ShardReplica).remote(0, tmp_path / "s0", Config(faiss_threads=1), [])
    yield replica
    ray.kill(replica)


def aggregator(tmp_path, shard, **options):
    cfg = Config(
        data_dir=tmp_path,
        compression="off",
        dedup_cosine=1.01,
        fusion_local_handoff=options.pop("local", True),
    )
    return ray.remote(Aggregator).options(max_concurrency=16, **options).remote(cfg, [shard])


def hand_over(handoff: Handoff, batch: FusedBatch, per: int = 16) -> set[str]:
    """As an extractor does: ``per`` frames at a time, one hand-over in flight; the instance ids seen."""
    handing, seen = None, set()
    for i in range(0, len(batch), per):
        if handing is not None:
            seen.add(handing.result())
        handing = handoff.submit(0, batch.rows(slice(i, i + per)), time.time())
    seen.add(handing.result())
    return seen


def test_rows_handed_over_by_socket_reach_the_shard_exactly_once(tmp_path, shard):
    agg = aggregator(tmp_path, shard)
    videos = {v: frames(v, 70) for v in range(40, 44)}
    seen, by_socket = {}, {}

    def extractor(v: int) -> None:  # several extractors at once, each with its own connection
        handoff = Handoff(agg)
        seen[v] = hand_over(handoff, videos[v])
        by_socket[v] = handoff.by_socket
        handoff.close()

    threads = [threading.Thread(target=extractor, args=(v,)) for v in videos]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert by_socket == dict.fromkeys(videos, True)
    finished = {v: ray.get(agg.finish.remote(v)) for v in videos}
    assert finished == {v: (70, ray.get(agg.finish.remote(0))[1]) for v in videos}
    assert set().union(*seen.values()) == {finished[40][1]}  # one instance, the one finish names
    for v, src in videos.items():
        for space in ("visual", "semantic"):
            times, held = ray.get(shard.frames.remote(space, v, 0, 1000))
            assert np.array_equal(held, src.space(space))  # exact, in order, none twice
            assert np.array_equal(times, src.times)
    stats = ray.get(agg.stats.remote())
    assert stats["rows_in"] == stats["rows_out"] == 280


def test_a_malformed_batch_fails_its_own_handover_with_the_reason(tmp_path, shard):
    agg = aggregator(tmp_path, shard)
    handoff = Handoff(agg)
    good = frames(50, 3)
    bad = FusedBatch(
        good.ids, good.times, np.ascontiguousarray(good.features[:, :5])
    )  # wrong width
    with pytest.raises(
        ValueError, match=r"float32 features \(3, 1664\); got \(3, 2\) and float32 \(3, 5\)"
    ):
        handoff.submit(0, bad, time.time()).result()
    too_many = frames(52, 9)
    with pytest.raises(ValueError, match="at most 8 frames; got 9"):
        with pytest.MonkeyPatch.context() as m:
            m.setattr("vifusion.fusion.handoff.MAX_ROWS", 8)
            handoff.submit(0, too_many, time.time()).result()
    hand_over(handoff, frames(51, 20))  # the connection goes on
    assert handoff.by_socket
    assert ray.get(agg.finish.remote(51))[0] == 20


def test_the_socket_lets_in_only_who_holds_the_secret(tmp_path, shard):
    agg = aggregator(tmp_path, shard)
    address, secret = ray.get(agg.handoff_address.remote())
    assert address.startswith(
        "\0"
    )  # abstract: no file to find, seen only in this network namespace
    handoff = Handoff(agg)
    hand_over(handoff, frames(60, 4))
    for wrong in (bytes(len(secret)), secret[:-1] + bytes([secret[-1] ^ 1])):
        with pytest.raises(ConnectionRefusedError, match="secret was refused"):
            wire.open_connection(socket.AF_UNIX, address, wrong, timeout=10)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:  # says nothing at all
        s.connect(address)
        s.settimeout(30)
        read_to_close(s)  # after the handshake's deadline, not never
    assert ray.get(agg.stats.remote())["rows_in"] == 4  # only the rows of the one who knew it


@ray.remote(num_cpus=0)
class Door:
    """Where an extractor asks for its aggregator's socket; this one names a proxy in front of it."""

    def __init__(self, address: str, secret: bytes) -> None:
        self._address = address, secret

    def handoff_address(self) -> tuple[str, bytes]:
        return self._address


def behind_a_proxy(**flips) -> tuple[HandoffServer, Proxy, Handoff, list[str]]:
    """A hand-over server, a proxy in front of it (``flips``: ``Proxy``'s), an extractor's
    end that goes through the proxy, and the batch ids the server took."""
    took: list[str] = []

    def submit(shard_no: int, batch: FusedBatch, extracted: float, urgent: bool) -> str:
        took.append(batch.batch_id)
        return "instance"

    server = HandoffServer(submit, f"test-{os.urandom(6).hex()}")
    proxy = Proxy(socket.AF_UNIX, server.address, **flips)
    return server, proxy, Handoff(Door.remote(proxy.address, server.secret)), took


HANDSHAKE = wire.NONCE_BYTES + wire.PROOF_BYTES  # what each end writes before its first message


def test_a_recorded_handover_replayed_is_refused_and_taken_once(ray_session):
    server, proxy, handoff, took = behind_a_proxy()
    batch = frames(90, 4)
    assert handoff.submit(0, batch, time.time()).result(30) == "instance"
    handoff.close()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:  # all the extractor wrote, again
        s.connect(server.address)
        s.settimeout(30)
        s.sendall(proxy.sent[0])
        read_to_close(s)  # the server's new nonce makes the recorded proof worthless
    assert took == [batch.batch_id]
    proxy.close()
    server.close()


def test_a_handover_altered_on_the_way_is_never_taken(ray_session):
    server, proxy, handoff, took = behind_a_proxy(
        flip_up=HANDSHAKE + 5_000
    )  # a byte of the features
    with pytest.raises(AggregatorLost, match="closed"):
        handoff.submit(0, frames(91, 16), time.time()).result(30)
    assert took == []
    handoff.close()
    proxy.close()
    server.close()


def test_a_reply_altered_on_the_way_is_not_believed(ray_session):
    server, proxy, handoff, took = behind_a_proxy(flip_down=HANDSHAKE)  # the status: "bad input"
    batch = frames(92, 4)
    with pytest.raises(AggregatorLost, match="failed its authentication"):
        handoff.submit(0, batch, time.time()).result(30)
    assert took == [
        batch.batch_id
    ]  # taken, but the extractor cannot tell: it sees the aggregator lost
    handoff.close()
    proxy.close()
    server.close()


def _header(rows: int, dims: int) -> bytes:
    """A hand-over's header as the extractor writes it: the sizes it announces."""
    return struct.pack("<4siIIBdH", b"VFH2", 0, rows, dims, 0, 0.0, 32)


def test_a_header_with_sizes_past_the_row_layout_is_refused_before_allocating(
    ray_session, monkeypatch, caplog
):
    """A header announcing more rows than a hand-over holds, or rows wider than the row
    layout, closes its connection at once, with a log line saying why: nothing allocated,
    nothing waited for. The next extractor's hand-over goes in."""
    crashed = []
    monkeypatch.setattr(threading, "excepthook", crashed.append)
    server, proxy, handoff, took = behind_a_proxy()
    with caplog.at_level("WARNING", logger="vifusion.fusion.handoff"):
        for rows, dims in ((2**32 - 1, 2**32 - 1), (2**32 - 1, 1664), (MAX_ROWS + 1, 1664)):
            channel = wire.open_connection(
                socket.AF_UNIX, server.address, server.secret, timeout=10
            )
            channel.send([_header(rows, dims)])  # and no rows: a server that waits for them hangs
            channel.conn.settimeout(10)
            assert read_to_close(channel.conn) == b""  # closed, no reply
            channel.close()
            assert f"{rows} rows of {dims} columns" in caplog.text
    assert caplog.text.count("refused") == 3
    batch = frames(93, 4)
    assert handoff.submit(0, batch, time.time()).result(30) == "instance"
    assert took == [batch.batch_id]
    assert crashed == []  # no exception escaped a connection's thread
    handoff.close()
    proxy.close()
    server.close()


def test_a_header_altered_on_the_way_is_refused_before_its_sizes_are_believed(ray_session, caplog):
    """A man in the middle who makes a header announce more rows had the aggregator allocate
    them (up to 109 MB) and wait for rows never sent, the extractor for a reply never sent.
    The header carries a tag of its own, checked first: the connection closes, the
    extractor's hand-over fails as for any lost aggregator (the video is indexed again)."""
    at = HANDSHAKE + 4 + 4 + 1  # the second byte of the row count: 16 rows -> 272
    server, proxy, handoff, took = behind_a_proxy(flip_up=at)
    with caplog.at_level("WARNING", logger="vifusion.comm.wire"):
        with pytest.raises(AggregatorLost, match="closed"):
            handoff.submit(0, frames(94, 16), time.time()).result(10)
    assert "message 0 on this connection failed its authentication" in caplog.text
    assert took == []
    handoff.close()
    proxy.close()
    server.close()


def test_a_reply_announcing_a_long_text_is_not_read(ray_session):
    """The extractor reads a reply's text before its tag: one altered to announce 16 MiB
    more of it fails the hand-over at once, nothing allocated for it, nothing waited for."""
    # the high byte of the text's length in the first reply (status, then length)
    server, proxy, handoff, took = behind_a_proxy(flip_down=HANDSHAKE + 4)
    batch = frames(95, 4)
    with pytest.raises(AggregatorLost, match="announced 16777224 bytes of text"):
        handoff.submit(0, batch, time.time()).result(10)
    assert took == [batch.batch_id]  # taken, as with any reply lost on the way
    handoff.close()
    proxy.close()
    server.close()


def test_a_restarted_aggregator_fails_the_handover_in_flight_and_is_noticed(tmp_path, shard):
    agg = aggregator(tmp_path, shard, max_restarts=1)
    handoff = Handoff(agg)
    first = hand_over(handoff, frames(70, 8))
    old_address = ray.get(agg.handoff_address.remote())
    ray.kill(agg, no_restart=False)
    while address_of(agg) in (old_address, None):
        time.sleep(0.1)
    with pytest.raises(AggregatorLost):
        handoff.submit(0, frames(70, 8, start=8), time.time()).result()
    second = hand_over(handoff, frames(71, 8))  # a new connection to the new instance
    assert handoff.by_socket
    assert len(first) == len(second) == 1 and first != second  # what an extractor compares
    assert ray.get(agg.finish.remote(71))[0] == 8


def address_of(agg) -> tuple[str, bytes] | None:
    try:
        return ray.get(agg.handoff_address.remote())
    except ray.exceptions.ActorUnavailableError:  # restarting
        return None


def test_without_the_socket_the_handover_is_an_actor_call(tmp_path, shard):
    agg = aggregator(tmp_path, shard, local=False)
    assert ray.get(agg.handoff_address.remote()) is None
    handoff = Handoff(agg)
    hand_over(handoff, frames(80, 40))
    assert not handoff.by_socket
    assert ray.get(agg.finish.remote(80))[0] == 40
    held = ray.get(shard.frames.remote("visual", 80, 0, 1000))[1]
    assert np.array_equal(held, frames(80, 40).space("visual"))
