"""The shard stream: fused batches from a sender to a shard's primary over one TCP connection,
a fraction of an actor call's CPU (docs/benchmarks.md, "Design notes moved from docstrings").

One connection per (sender, shard), batches in order as raw arrays (``wire.py``), each
acknowledged with what ``ShardReplica.receive`` returns, once it is in the log. A batch is two
messages, each with its tag: its header (the sizes of its arrays), then the arrays. The shard
checks the header's tag, then its sizes (exact integers, within the row layout and
``MAX_MESSAGE_BYTES``), and only then allocates: a man in the middle cannot make it reserve
memory, and a sender holding the secret at most ``MAX_MESSAGE_BYTES``. The address
and a per-replica secret come by an actor call; a connection without the secret, or a
message altered, injected or replayed, is closed before anything is applied or believed.
Nothing is lost where the stream fails: batches in flight on a closed connection fail with
``StreamLost``, ones naming unknown tables with ``TablesUnknown``, and the transport sends
them again by actor call (the shard ignores a batch id it has seen).
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np

from vifusion._files import StorageError, storage_reason
from vifusion.comm import wire
from vifusion.comm._layout import _D
from vifusion.comm.codec import Encoded
from vifusion.comm.message import WireBatch

log = logging.getLogger(__name__)

Ack = tuple[
    int, float, float, float
]  # vectors held, service s, cost s, busy s (``ShardReplica.receive``)

# magic, kind, rows, arrays, then the lengths of: codec, version, batch id
_HEAD = struct.Struct("<4sBIBBBH")
_MAGIC = b"VFS1"
_BATCH, _PING = 0, 1
_ARRAY = struct.Struct("<4sB")  # dtype (numpy's str, e.g. "<f4"), ndim; then ndim dims ("<Q")
_DIM = struct.Struct("<Q")
_MAX_NDIM = 2
_KINDS = "fiub"  # numbers only: a header never makes the shard build an object array
# status, then the acknowledgement, then the length of the text: the error, or a storage reason
_REPLY = struct.Struct("<BqdddI")
_OK, _BAD_INPUT, _TABLES, _STORAGE, _FAILED = range(5)
MAX_MESSAGE_BYTES = 256 << 20  # the shard allocates what a header announces
# A row travels as at least its id and its times (16 bytes); no array is wider than a row.
MAX_ROWS = MAX_MESSAGE_BYTES // 16
# An acknowledgement's text (an error) is read before its tag: what a reply may announce.
MAX_REPLY_TEXT = 64 << 10
_STAGED = 8  # batches a connection may have applied and not yet acknowledged
_NO_ACK: Ack = (0, 0.0, 0.0, 0.0)
_CONNECT_TIMEOUT_S = 5.0


class StreamLost(ConnectionError):
    """The stream closed (or never opened) with this batch in flight: send it another way."""


class TablesUnknown(ValueError):
    """The batch names a tables version the shard does not hold: send it with the tables."""


class StreamServer:
    """The primary replica's end. Each batch goes to ``stage``, which applies it and returns
    the function that makes it durable and returns its acknowledgement; a probe goes to
    ``ping``. Per connection, one thread reads and checks requests (``wire.Channel``),
    another stages the batches, a third commits and acknowledges them, in order: the log
    syncs a batch while the next is applied and the one after is read, and one sync serves
    all staged by then (``WriteAheadLog.sync``). Checking a batch's tag on the thread that
    applies them would put it in the way of every batch."""

    def __init__(
        self, stage: Callable[[WireBatch], Callable[[], Ack]], ping: Callable[[], Ack], host: str
    ) -> None:
        self._stage, self._ping = stage, ping
        listener = socket.socket(_family(host), socket.SOCK_STREAM)
        listener.bind((host, 0))
        self.address: tuple[str, int] = listener.getsockname()[:2]
        self._server = wire.Server(listener, self._serve, "shard-stream")
        self.secret = self._server.secret

    def close(self) -> None:
        self._server.close()

    def _serve(self, channel: wire.Channel) -> None:
        channel.conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # For the reply thread, in order: a batch's commit, a probe, or why a batch failed.
        replies: queue.Queue = queue.Queue(_STAGED)
        replier = threading.Thread(
            target=self._reply, args=(channel, replies), name="shard-stream-reply", daemon=True
        )
        replier.start()
        try:
            while (request := _read_request(channel)) is not None:
                if request is _PING:
                    replies.put(self._ping)
                    continue
                try:
                    replies.put(self._stage(request))
                except Exception as e:
                    replies.put(e)
        finally:
            replies.put(None)
            replier.join()

    @staticmethod
    def _reply(channel: wire.Channel, replies: queue.Queue) -> None:
        while (item := replies.get()) is not None:
            ack, status, text = _NO_ACK, _OK, ""
            try:
                if isinstance(item, Exception):
                    raise item
                ack = item()
            except Exception as e:
                status, text = _status(e)
            data = text.encode()[:MAX_REPLY_TEXT]
            try:
                channel.send([_REPLY.pack(status, *ack, len(data)), data])
            except OSError:
                break
        while item is not None:  # the connection failed: drain, so the reader never blocks
            item = replies.get()


def _status(e: Exception) -> tuple[int, str]:
    """A failed batch's reply: its status and text."""
    if isinstance(e, TablesUnknown):
        return _TABLES, str(e)
    if isinstance(e, ValueError):  # a malformed batch: the sender's error
        return _BAD_INPUT, str(e)
    reason = storage_reason(e)
    if reason is None:
        log.error("shard stream", exc_info=e)
    return (_STORAGE, f"{reason}\n{e}") if reason else (_FAILED, f"{type(e).__name__}: {e}")


class ShardStream:
    """A sender's end, for one shard primary. ``send`` and ``ping`` return at once with a
    ``Future`` of the acknowledgement; batches leave and are acknowledged in order. A writer
    thread connects and sends, a reader thread resolves the futures; once the connection
    fails, every future so far fails with ``StreamLost`` and so does every later one
    (``closed``: make a new stream)."""

    def __init__(self, address: tuple[str, int], secret: bytes) -> None:
        self._address, self._secret = address, secret
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()  # (message, future), None: stop
        self._awaiting: deque[Future] = deque()  # sent, in order
        self._lock = threading.Lock()
        self._channel: wire.Channel | None = None
        self.closed, self._why = False, ""
        threading.Thread(target=self._write, name="shard-stream-write", daemon=True).start()

    def send(self, batch: WireBatch) -> Future:
        return self._post(batch)

    def ping(self) -> Future:
        return self._post(_PING)

    def close(self) -> None:
        self._fail("the stream was closed")

    def _post(self, message: WireBatch | int) -> Future:
        future: Future = Future()
        with self._lock:
            if self.closed:
                future.set_exception(StreamLost(self._why))
                return future
            self._outbox.put((message, future))
        return future

    def _write(self) -> None:
        try:
            channel = wire.open_connection(
                _family(self._address[0]), self._address, self._secret, timeout=_CONNECT_TIMEOUT_S
            )
        except OSError as e:
            self._fail(f"cannot open the shard stream to {self._address}: {e}")
            return
        with self._lock:
            if self.closed:
                channel.close()
                return
            self._channel = channel
        threading.Thread(
            target=self._read, args=(channel,), name="shard-stream-read", daemon=True
        ).start()
        while (item := self._outbox.get()) is not None:
            message, future = item
            try:
                parts = _request(message)
            except ValueError as e:  # this batch cannot travel here; the stream goes on
                future.set_exception(e)
                continue
            with self._lock:
                if self.closed:
                    future.set_exception(StreamLost(self._why))
                    continue
                self._awaiting.append(future)
            try:
                channel.send_messages(parts)
            except OSError as e:
                self._fail(f"the shard stream failed under a send: {e}")

    def _read(self, channel: wire.Channel) -> None:
        reply, why = bytearray(_REPLY.size), "the shard closed the stream"
        while True:
            try:
                if not channel.read_into(memoryview(reply)):
                    break
                status, n, service_s, fixed_s, busy_s, length = _REPLY.unpack(reply)
                if length > MAX_REPLY_TEXT:  # not the shard's: it sends no more
                    why = f"the shard stream closed: a reply announced {length} bytes of text"
                    break
                text = bytearray(length)
                if not channel.read_into(memoryview(text)) or not channel.check():
                    break
            except wire.Forged as e:  # not the shard's acknowledgement
                why = f"the shard stream closed: {e}"
                break
            except OSError:
                break
            with self._lock:
                future = self._awaiting.popleft() if self._awaiting else None
            if future is None:  # a reply to nothing: not a shard stream
                break
            if status == _OK:
                future.set_result((n, service_s, fixed_s, busy_s))
            else:
                future.set_exception(_error(status, text.decode(errors="replace")))
        self._fail(why)

    def _fail(self, why: str) -> None:
        """The end of this stream: fail every batch sent or waiting to be."""
        with self._lock:
            if not self.closed:
                self.closed, self._why = True, why
            failed = list(self._awaiting)
            self._awaiting.clear()
            while True:
                try:
                    item = self._outbox.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    failed.append(item[1])
            if self._channel is not None:
                # wakes the reader (and a writer blocked in a send); it fails nothing twice
                with contextlib.suppress(OSError):
                    self._channel.conn.shutdown(socket.SHUT_RDWR)
            self._outbox.put(None)  # the writer stops
        for future in failed:
            if not future.done():
                future.set_exception(StreamLost(self._why))


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _request(message: WireBatch | int) -> list[list]:
    """A batch (or a probe) as the messages of one request, each a list of parts: a probe's
    header; a batch's header (its names and its arrays' specs), then its arrays."""
    if message is _PING:
        return [[_HEAD.pack(_MAGIC, _PING, 0, 0, 0, 0, 0)]]
    batch: WireBatch = message
    p = batch.payload
    codec, version, batch_id = p.codec.encode(), p.version.encode(), batch.batch_id.encode()
    arrays = [np.ascontiguousarray(a) for a in (batch.ids, batch.times, *p.arrays)]
    header = [
        _HEAD.pack(_MAGIC, _BATCH, p.rows, len(arrays), len(codec), len(version), len(batch_id)),
        codec,
        version,
        batch_id,
    ]
    for a in arrays:
        if a.ndim > _MAX_NDIM:
            raise ValueError(f"a {a.ndim}-d array cannot travel on the shard stream")
        header.append(
            _ARRAY.pack(a.dtype.str.encode(), a.ndim) + b"".join(_DIM.pack(d) for d in a.shape)
        )
    return [header, arrays]


def _read_request(channel: wire.Channel) -> WireBatch | int | None:
    """The next request on ``channel``: a batch, ``_PING``, or None where it closed (or sent
    something malformed: the connection is then closed, and the sender told so). Raises
    ``wire.Forged`` where it fails its tag: nothing of it is used."""
    head = bytearray(_HEAD.size)
    if not channel.read_into(memoryview(head)):
        return None
    magic, kind, rows, count, codec_len, version_len, id_len = _HEAD.unpack(head)
    if magic != _MAGIC or kind not in (_BATCH, _PING):
        log.warning("shard stream: a malformed request, connection closed")
        return None
    if kind == _PING:
        return _PING if channel.check() else None
    names = bytearray(codec_len + version_len + id_len)
    if not channel.read_into(memoryview(names)):
        return None
    shapes = []
    for _ in range(count):
        spec = bytearray(_ARRAY.size)
        if not channel.read_into(memoryview(spec)):
            return None
        dtype, ndim = _ARRAY.unpack(spec)
        dims = bytearray(_DIM.size * ndim)
        if ndim > _MAX_NDIM or not channel.read_into(memoryview(dims)):
            return None
        try:
            dtype = np.dtype(dtype.rstrip(b"\0").decode())
        except (TypeError, UnicodeDecodeError):
            return None
        shapes.append((tuple(d for (d,) in _DIM.iter_unpack(dims)), dtype))
    if not channel.check():  # the header is the sender's: its sizes may now be weighed
        return None
    why = _refused(rows, shapes)
    if why:
        log.warning(
            "shard stream: a request of %d rows, arrays %s, refused: %s; connection closed",
            rows,
            [(s, str(t)) for s, t in shapes],
            why,
        )
        return None
    arrays = [np.empty(s, t) for s, t in shapes]
    for a in arrays:
        if a.nbytes and not channel.read_into(memoryview(a).cast("B")):
            return None
    if not channel.check():
        return None
    try:
        codec, version, batch_id = (
            bytes(names[a:b]).decode()
            for a, b in (
                (0, codec_len),
                (codec_len, codec_len + version_len),
                (codec_len + version_len, None),
            )
        )
    except UnicodeDecodeError:
        return None
    return WireBatch(
        arrays[0], arrays[1], Encoded(codec, version, rows, tuple(arrays[2:])), batch_id
    )


def _refused(rows: int, shapes: list[tuple[tuple[int, ...], np.dtype]]) -> str:
    """Why a batch's header is refused before anything is allocated for it ("": it is not).
    Sizes are Python ints: exact, where numpy's int64 product wraps round (2**32 * 2**32
    is 0 there)."""
    if len(shapes) < 2:
        return "a batch is ids, times and its payload"
    if any(t.kind not in _KINDS for _, t in shapes):
        return "arrays of numbers only"
    if rows > MAX_ROWS or any(
        not s or s[0] > MAX_ROWS or max(s[1:], default=0) > _D for s, _ in shapes
    ):
        return f"at most {MAX_ROWS} rows of at most {_D} columns"
    size = sum(math.prod(s) * t.itemsize for s, t in shapes)
    if size > MAX_MESSAGE_BYTES:
        return f"{size} bytes, over {MAX_MESSAGE_BYTES}"
    return ""


def _error(status: int, text: str) -> Exception:
    """The exception a failed batch raises on the sender, as the actor call would."""
    if status == _TABLES:
        return TablesUnknown(text)
    if status == _BAD_INPUT:
        return ValueError(text)
    if status == _STORAGE:
        reason, _, message = text.partition("\n")
        return StorageError(reason, message)
    return RuntimeError(text)
