"""Authenticated request/response sockets: what the local hand-over (``fusion/handoff.py``)
and the shard stream (``stream.py``) share.

A connection opens with a per-server secret, which a client gets from the server's actor by
a call that Ray's token authenticates; the server closes a connection that sends anything
else, or nothing within a few seconds, and answers the secret with one byte. Then the
client writes requests and reads one reply per request, in order. Arrays travel raw: the
sender hands their buffers to ``sendmsg`` (one copy, into the socket), the receiver reads
them straight into arrays of its own (``recv_into``).
"""

from __future__ import annotations

import contextlib
import hmac
import os
import socket
import threading
from collections.abc import Callable, Sequence

SECRET_BYTES = 32
_SECRET_WAIT_S = 5.0  # a stranger that says nothing does not keep a thread
_WELCOME = b"+"


class Server:
    """Accepts connections on ``listener``, each in a thread of its own; one that opens with
    the secret goes to ``serve(conn)``, which reads requests until the connection closes."""

    def __init__(self, listener: socket.socket, serve: Callable[[socket.socket], None], name: str) -> None:
        self.secret = os.urandom(SECRET_BYTES)
        self._listener = listener
        self._serve = serve
        self._name = name
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
            threading.Thread(target=self._welcome, args=(conn,), name=f"{self._name}-conn", daemon=True).start()

    def _welcome(self, conn: socket.socket) -> None:
        with conn:
            secret = bytearray(SECRET_BYTES)
            conn.settimeout(_SECRET_WAIT_S)
            try:
                if not read_into(conn, memoryview(secret)) or not hmac.compare_digest(bytes(secret), self.secret):
                    return
                conn.settimeout(None)
                conn.sendall(_WELCOME)
            except OSError:  # timed out, or gone
                return
            self._serve(conn)


def open_connection(family: int, address: str | tuple[str, int], secret: bytes,
                    timeout: float | None = None) -> socket.socket:
    """Connect, present ``secret`` and wait for the welcome. Raises OSError where the server
    is out of reach or closed the connection (a wrong secret, or a server going away)."""
    conn = socket.socket(family, socket.SOCK_STREAM)
    try:
        conn.settimeout(timeout)
        conn.connect(address)
        if family != socket.AF_UNIX:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # replies are small and awaited
        conn.sendall(secret)
        welcome = bytearray(1)
        if not read_into(conn, memoryview(welcome)) or bytes(welcome) != _WELCOME:
            raise ConnectionRefusedError("the server closed the connection: the secret was refused")
        conn.settimeout(None)
    except BaseException:
        conn.close()
        raise
    return conn


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


_IOV_MAX = 1024  # Linux's limit on the parts of one sendmsg
