"""Authenticated request/response sockets: what the local hand-over (``fusion/handoff.py``)
and the shard stream (``stream.py``) share.

Both ends hold a per-server secret (never on the socket). A connection opens with a
challenge each way (HMAC-SHA256 over both nonces, a label per side); each direction then
has its own key, and every message ends with an AES-GMAC tag under it, its sequence number
as nonce: a message altered, injected, replayed, reordered or reflected closes the
connection before it is used. No encryption: only the frames' origin must be sure.

A server gives a connection ``HANDSHAKE_S`` to prove the secret and holds at most
``MAX_HANDSHAKES`` unproven ones (a new one closes the oldest). Then one reply per request,
in order; arrays travel raw (``sendmsg`` from their buffers, ``recv_into`` arrays). Why
GMAC and the rest: docs/benchmarks.md, "Design notes moved from docstrings".
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

SECRET_BYTES = NONCE_BYTES = PROOF_BYTES = 32
TAG_BYTES = 16
# In all, to prove the secret: a client on the cluster's network takes milliseconds, and a
# stranger that stalls, or sends a byte at a time, does not keep a thread longer.
HANDSHAKE_S = 5.0
# Connections in their handshake at once, each a thread. A client is in it for two round
# trips, so only more than this connecting within them closes one (a sender then goes by
# actor call and opens the stream again later); strangers cannot hold more threads.
MAX_HANDSHAKES = 16
_CLIENT_PROOF, _SERVER_PROOF = b"vifusion client proof", b"vifusion server proof"
_CLIENT_KEY, _SERVER_KEY = b"vifusion client key", b"vifusion server key"
_NONCE = struct.Struct("<4xQ")  # GCM's 96 bits: the message's sequence number
log = logging.getLogger(__name__)


class Forged(ConnectionError):
    """The other end sent a message or a proof that fails its tag: the connection closes."""


class Channel:
    """One authenticated connection (``conn``): ``send`` writes a message and its tag; a
    reader fills the parts of the next message with ``read_into`` and calls ``check`` at its
    end, before it uses any of it. One thread may send while another reads."""

    def __init__(self, conn: socket.socket, send_key: bytes, receive_key: bytes) -> None:
        self.conn = conn
        self._send_key, self._receive_key = algorithms.AES(send_key), algorithms.AES(receive_key)
        self._sent = self._received = 0
        self._reading = _Tag(self._receive_key, 0)

    def send(self, parts: Sequence) -> None:
        """Write one message, ``parts`` (bytes-like) in order, then its tag."""
        self.send_messages([parts])

    def send_messages(self, messages: Sequence[Sequence]) -> None:
        """Write several messages, each its parts then its tag, in one go: a header with a
        tag of its own lets the reader trust the sizes it announces before it allocates."""
        out = []
        for parts in messages:
            tag = _Tag(self._send_key, self._sent)
            for p in parts:
                tag.update(memoryview(p).cast("B"))
            self._sent += 1
            out += [*parts, tag.digest()]
        send_all(self.conn, out)

    def read_into(self, view: memoryview) -> bool:
        """Fill ``view`` with the next bytes of this message; False where the connection closed first."""
        view = view.cast("B")
        if not read_into(self.conn, view):
            return False
        self._reading.update(view)
        return True

    def check(self) -> bool:
        """Read the tag that ends this message: False where the connection closed first;
        raises ``Forged`` where it does not match what was read."""
        tag = bytearray(TAG_BYTES)
        if not read_into(self.conn, memoryview(tag)):
            return False
        if not hmac.compare_digest(self._reading.digest(), tag):
            raise Forged(f"message {self._received} on this connection failed its authentication")
        self._received += 1
        self._reading = _Tag(self._receive_key, self._received)
        return True

    def close(self) -> None:
        self.conn.close()


class Server:
    """Accepts connections on ``listener``, each in a thread of its own; one whose client
    proves the secret goes to ``serve(channel)``, which reads requests until the connection
    closes. ``handshake_s``, ``max_handshakes``: as ``HANDSHAKE_S``, ``MAX_HANDSHAKES``."""

    def __init__(
        self,
        listener: socket.socket,
        serve: Callable[[Channel], None],
        name: str,
        handshake_s: float = HANDSHAKE_S,
        max_handshakes: int = MAX_HANDSHAKES,
    ) -> None:
        self.secret = os.urandom(SECRET_BYTES)
        self._listener = listener
        self._serve = serve
        self._name = name
        self._handshake_s, self._max_handshakes = handshake_s, max_handshakes
        self._waiting: dict[
            socket.socket, None
        ] = {}  # connections in their handshake, oldest first
        self._lock = threading.Lock()
        listener.listen(64)
        threading.Thread(target=self._accept, name=f"{name}-accept", daemon=True).start()

    def close(self) -> None:
        # shutdown wakes the accept thread; close alone leaves it blocked in accept()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed
                return
            with self._lock:
                if len(self._waiting) >= self._max_handshakes:  # the oldest one waiting makes room
                    oldest = next(iter(self._waiting))
                    del self._waiting[oldest]
                    with contextlib.suppress(OSError):
                        oldest.shutdown(socket.SHUT_RDWR)  # wakes its thread, which closes it
                self._waiting[conn] = None
            threading.Thread(
                target=self._welcome, args=(conn,), name=f"{self._name}-conn", daemon=True
            ).start()

    def _welcome(self, conn: socket.socket) -> None:
        with conn:
            try:
                channel = _answer(conn, self.secret, time.monotonic() + self._handshake_s)
            except OSError:  # out of time, closed to make room, or gone
                channel = None
            with self._lock:
                made_room = conn not in self._waiting  # closed meanwhile, whatever it answered
                self._waiting.pop(conn, None)
            if channel is None or made_room:
                return
            try:
                self._serve(channel)
            except Forged as e:
                log.warning("%s: %s; connection closed", self._name, e)
            except OSError:  # the client went away
                pass


def _answer(conn: socket.socket, secret: bytes, deadline: float) -> Channel | None:
    """The server's half of the handshake; None where the client's proof is wrong."""
    conn.settimeout(max(deadline - time.monotonic(), 0.0))
    ours = os.urandom(NONCE_BYTES)
    conn.sendall(ours)
    theirs = bytearray(NONCE_BYTES + PROOF_BYTES)  # the client's nonce, then its proof
    if not _read_by(conn, memoryview(theirs), deadline):
        return None
    nonces = bytes(theirs[:NONCE_BYTES]) + ours
    if not hmac.compare_digest(theirs[NONCE_BYTES:], _derive(secret, _CLIENT_PROOF, nonces)):
        return None
    conn.sendall(_derive(secret, _SERVER_PROOF, nonces))
    conn.settimeout(None)
    return Channel(conn, _derive(secret, _SERVER_KEY, nonces), _derive(secret, _CLIENT_KEY, nonces))


def open_connection(
    family: int, address: str | tuple[str, int], secret: bytes, timeout: float | None = None
) -> Channel:
    """Connect and prove ``secret`` both ways. Raises OSError where the server is out of
    reach or closed the connection (a wrong secret, or a server going away), ``Forged``
    where it does not prove it holds the secret."""
    conn = socket.socket(family, socket.SOCK_STREAM)
    try:
        conn.settimeout(timeout)
        conn.connect(address)
        if family != socket.AF_UNIX:
            conn.setsockopt(
                socket.IPPROTO_TCP, socket.TCP_NODELAY, 1
            )  # replies are small and awaited
        ours = os.urandom(NONCE_BYTES)
        conn.sendall(ours)
        theirs = bytearray(NONCE_BYTES)
        if not read_into(conn, memoryview(theirs)):
            raise ConnectionRefusedError("the server closed the connection")
        nonces = ours + bytes(theirs)
        conn.sendall(_derive(secret, _CLIENT_PROOF, nonces))
        proof = bytearray(PROOF_BYTES)
        if not read_into(conn, memoryview(proof)):
            raise ConnectionRefusedError("the server closed the connection: the secret was refused")
        if not hmac.compare_digest(proof, _derive(secret, _SERVER_PROOF, nonces)):
            raise Forged("the server did not prove it holds the secret")
        conn.settimeout(None)
    except BaseException:
        conn.close()
        raise
    return Channel(conn, _derive(secret, _CLIENT_KEY, nonces), _derive(secret, _SERVER_KEY, nonces))


def _derive(secret: bytes, label: bytes, nonces: bytes) -> bytes:
    """A proof, or a connection's key for one direction: bound to the secret, the label and
    both ends' nonces."""
    return hmac.digest(secret, label + nonces, "sha256")


class _Tag:
    """The tag of message ``seq`` in one direction (``key``'s), fed its bytes in parts. A
    nonce is never used twice under a key: each connection's keys are new."""

    def __init__(self, key: algorithms.AES, seq: int) -> None:
        self._gcm = Cipher(key, modes.GCM(_NONCE.pack(seq))).encryptor()

    def update(self, data: memoryview) -> None:
        self._gcm.authenticate_additional_data(data)

    def digest(self) -> bytes:
        self._gcm.finalize()
        return self._gcm.tag


def send_all(conn: socket.socket, parts: Sequence) -> None:
    """Write ``parts`` (bytes-like) in order without joining them: one copy, into the socket."""
    views = [v for v in (memoryview(p).cast("B") for p in parts) if len(v)]
    while views:
        sent = conn.sendmsg(views[:_IOV_MAX])  # may write part of a large message
        while views and sent >= len(views[0]):
            sent -= len(views.pop(0))
        if views:
            views[0] = views[0][sent:]


def read_into(conn: socket.socket, view: memoryview) -> bool:
    """Fill ``view`` from ``conn``; False where the connection closed first."""
    view = view.cast("B")
    while len(view):
        got = conn.recv_into(view)
        if not got:
            return False
        view = view[got:]
    return True


def _read_by(conn: socket.socket, view: memoryview, deadline: float) -> bool:
    """``read_into``, all of it before ``deadline`` (``time.monotonic``): one who sends a
    byte at a time gets no longer than one who sends nothing. TimeoutError past it."""
    view = view.cast("B")
    while len(view):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the handshake took too long")
        conn.settimeout(left)
        got = conn.recv_into(view)
        if not got:
            return False
        view = view[got:]
    return True


_IOV_MAX = 1024  # Linux's limit on the parts of one sendmsg
