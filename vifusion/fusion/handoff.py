"""The hand-over from an extractor to its node's aggregator, through a local socket: the first
hop stays on one host, so it goes without Ray, at a fraction of an actor call's CPU.

The aggregator listens on a Unix socket in Linux's abstract namespace (seen only on its
host); an extractor writes its rows there as raw arrays (``comm/wire.py``: a per-instance
secret proved on connecting, every message tagged). A hand-over is two messages: its header
(the sizes), then its batch id and rows. The aggregator checks the header's tag, then its
sizes (within the row layout and ``MAX_ROWS``), and only then allocates: a man in the middle
cannot make it reserve memory and wait for rows never sent. The reply carries the aggregator's
instance id, so a restart is noticed as with an actor call; a connection that closes under a
hand-over, or a reply that fails its tag or announces more than ``MAX_REPLY_TEXT``, raises
``AggregatorLost``. Where the socket cannot be reached the hand-over is an actor call.
Figures: docs/benchmarks.md, "Design notes moved from docstrings".
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait

import numpy as np
import ray
from ray.actor import ActorHandle

from vifusion.comm import wire
from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FusedBatch

log = logging.getLogger(__name__)

# magic, shard, rows, dims, urgent, extracted, batch id length: a message of its own
_HEAD = struct.Struct("<4siIIBdH")
_MAGIC = b"VFH2"  # 2: the header has its own tag
_REPLY = struct.Struct("<BI")  # status, text length; the text: the instance id or the error
_OK, _BAD_INPUT, _FAILED = 0, 1, 2
_SOCKET_BUFFER = 1 << 20  # a hand-over (64 frames, 426 KiB) in one or two writes
MAX_ROWS = 16_384  # per hand-over (109 MB): the aggregator allocates what the header announces
_DIMS = VISUAL_DIM + SEMANTIC_DIM
# A reply's text (the instance id, or an error) is read before its tag: what one may announce.
MAX_REPLY_TEXT = 64 << 10

Submit = Callable[[int, FusedBatch, float, bool], str]


class AggregatorLost(RuntimeError):
    """The node aggregator restarted while it held this video's rows: they are gone."""


class HandoffServer:
    """The aggregator's end: accepts local connections and passes each hand-over to
    ``submit`` (``Aggregator.submit``), answering once it returns."""

    def __init__(self, submit: Submit, name: str) -> None:
        self._submit = submit
        self.address = "\0vifusion-aggregator-" + name
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.address)
        self._server = wire.Server(listener, self._serve, "handoff")
        self.secret = self._server.secret

    def close(self) -> None:
        self._server.close()

    def _serve(self, channel: wire.Channel) -> None:
        channel.conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _SOCKET_BUFFER)
        while (request := _read_request(channel)) is not None:
            shard_no, batch, extracted, urgent = request
            try:
                status, text = _OK, self._submit(shard_no, batch, extracted, urgent)
            except ValueError as e:  # the rows were malformed: the caller's error
                status, text = _BAD_INPUT, str(e)
            except Exception as e:
                log.exception("hand-over")
                status, text = _FAILED, f"{type(e).__name__}: {e}"
            try:
                _reply(channel, status, text)
            except OSError:
                return


def open_server(submit: Submit, name: str) -> HandoffServer | None:
    """A ``HandoffServer``, or None where this host has no abstract Unix sockets (not Linux):
    extractors then hand over by actor call only."""
    try:
        return HandoffServer(submit, name)
    except OSError as e:
        log.info("no local hand-over socket: %s", e)
        return None


class Handoff:
    """An extractor's end, for one node aggregator. ``submit`` returns at once with a
    ``Future`` of the aggregator's instance id, so one hand-over travels while the caller
    embeds the next frames; a caller waits for it before the next ``submit``."""

    def __init__(self, aggregator: ActorHandle, local: bool = True) -> None:
        """``local``: try the socket first (False: always an actor call)."""
        self._aggregator = aggregator
        self._local = local
        self._unreachable = False  # the socket was out of reach: actor calls until ``reset``
        self._channel: wire.Channel | None = None
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="handoff")
        self._last: Future[str] | None = None

    @property
    def by_socket(self) -> bool:
        """Whether hand-overs travel through the aggregator's local socket (after one ``submit``)."""
        return self._channel is not None

    def submit(
        self, shard_no: int, batch: FusedBatch, extracted: float, urgent: bool = False
    ) -> Future[str]:
        if self._local and self._connect():
            self._last = self._worker.submit(self._send, shard_no, batch, extracted, urgent)
        else:
            self._last = self._aggregator.submit.remote(shard_no, batch, extracted, urgent).future()
        return self._last

    def reset(self) -> None:
        """Try the socket again at the next ``submit`` where it was out of reach (a restart
        under the last try leaves the extractor on actor calls only until then)."""
        self._unreachable = False

    def settle(self) -> None:
        """Wait until the last hand-over is in the aggregator or failed (its outcome is its
        ``Future``'s): what follows, ``abandon`` say, then sees every row handed over."""
        if self._last is not None:
            wait([self._last])

    def close(self) -> None:
        self._worker.shutdown()
        self._drop()

    def _connect(self) -> bool:
        if self._channel is not None:
            return True
        if self._unreachable:
            return False
        address = ray.get(self._aggregator.handoff_address.remote())
        if address is None:
            self._unreachable = True
            return False
        name, secret = address
        try:
            channel = wire.open_connection(socket.AF_UNIX, name, secret)
            channel.conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SOCKET_BUFFER)
        except OSError as e:  # another host, or a restart under us: the actor call
            log.info("hand-over by actor call: the aggregator's socket is out of reach (%s)", e)
            self._unreachable = True
            return False
        self._channel = channel
        return True

    def _send(self, shard_no: int, batch: FusedBatch, extracted: float, urgent: bool) -> str:
        batch.check()  # here, as the aggregator would: the wire format trusts the shapes
        if len(batch) > MAX_ROWS:
            raise ValueError(f"a hand-over holds at most {MAX_ROWS} frames; got {len(batch)}")
        channel = self._channel
        if channel is None:  # an earlier hand-over lost the connection; its caller was told
            raise AggregatorLost("the node aggregator's connection closed")
        batch_id = batch.batch_id.encode()
        head = _HEAD.pack(
            _MAGIC, shard_no, len(batch), batch.features.shape[1], urgent, extracted, len(batch_id)
        )
        try:
            rows = [np.ascontiguousarray(a) for a in (batch.ids, batch.times, batch.features)]
            channel.send_messages([[head], [batch_id, *rows]])
            status, text = _read_reply(channel)
        except (OSError, AggregatorLost) as e:
            self._drop()
            raise AggregatorLost(
                f"the node aggregator's connection closed under a hand-over ({e})"
            ) from e
        if status == _BAD_INPUT:
            raise ValueError(text)
        if status != _OK:
            raise RuntimeError(f"the node aggregator failed: {text}")
        return text

    def _drop(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None


def _read_request(channel: wire.Channel) -> tuple[int, FusedBatch, float, bool] | None:
    """The next hand-over on ``channel``, or None where it closed (or its header is refused).
    Raises ``wire.Forged`` where its header or its rows fail their tag: nothing of it is used."""
    head = bytearray(_HEAD.size)
    if not channel.read_into(memoryview(head)) or not channel.check():
        return None  # past ``check``, the header is the extractor's: its sizes may be weighed
    magic, shard_no, n, dims, urgent, extracted, id_len = _HEAD.unpack(head)
    why = _refused(magic, n, dims)
    if why:
        log.warning(
            "hand-over: a request of %d rows of %d columns (%d bytes) refused: %s; "
            "connection closed",
            n,
            dims,
            n * _row_bytes(dims),
            why,
        )
        return None
    batch_id = bytearray(id_len)
    ids = np.empty(n, np.int64)
    times = np.empty((n, 2), np.float32)
    features = np.empty((n, dims), np.float32)
    for a in (batch_id, ids, times, features):
        if not channel.read_into(memoryview(a).cast("B")):
            return None
    if not channel.check():
        return None
    return shard_no, FusedBatch(ids, times, features, batch_id.decode()), extracted, bool(urgent)


def _refused(magic: bytes, rows: int, dims: int) -> str:
    """Why a hand-over's header is refused before anything is allocated for it ("": it is
    not). ``struct`` gives Python ints: exact, never wrapped round as numpy's may be."""
    if magic != _MAGIC:
        return f"not a hand-over ({magic!r})"
    if dims != _DIMS:
        return f"a row has {_DIMS} columns"
    if rows > MAX_ROWS:
        return f"at most {MAX_ROWS} rows ({MAX_ROWS * _row_bytes(_DIMS)} bytes)"
    return ""


def _row_bytes(dims: int) -> int:
    """What a row of ``dims`` columns takes on the wire: its id, its time range, its features."""
    return 8 + 2 * 4 + 4 * dims


def _reply(channel: wire.Channel, status: int, text: str) -> None:
    data = text.encode()[:MAX_REPLY_TEXT]
    channel.send([_REPLY.pack(status, len(data)), data])


def _read_reply(channel: wire.Channel) -> tuple[int, str]:
    """Raises ``wire.Forged`` where the reply fails its tag."""
    head = bytearray(_REPLY.size)
    if not channel.read_into(memoryview(head)):
        raise AggregatorLost("the node aggregator closed the connection")
    status, length = _REPLY.unpack(head)
    if length > MAX_REPLY_TEXT:  # not the aggregator's: it sends no more
        raise AggregatorLost(f"a reply announced {length} bytes of text")
    text = bytearray(length)
    if not channel.read_into(memoryview(text)) or not channel.check():
        raise AggregatorLost("the node aggregator closed the connection")
    return status, text.decode(errors="replace")  # a long error may be cut mid-character
