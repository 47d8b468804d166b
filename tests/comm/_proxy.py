"""A man in the middle on real sockets, for the tests of the authenticated connections."""

from __future__ import annotations

import contextlib
import os
import socket
import threading


class Proxy:
    """Forwards every connection made to ``address`` on to ``upstream``, both ways, and
    records what each client wrote (``sent``, one bytearray per connection, as written); ``flip_up`` /
    ``flip_down``: the offset of the byte it flips in what a client writes / what the server
    writes, on every connection."""

    def __init__(
        self,
        family: int,
        upstream: str | tuple[str, int],
        flip_up: int | None = None,
        flip_down: int | None = None,
    ) -> None:
        self._family, self._upstream = family, upstream
        self._flips = flip_up, flip_down
        self.sent: list[bytearray] = []
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.bind(
            ("127.0.0.1", 0)
            if family == socket.AF_INET
            else f"\0vifusion-test-{os.urandom(6).hex()}"
        )
        self.address: str | tuple[str, int] = self._listener.getsockname()
        if (
            family == socket.AF_UNIX
        ):  # abstract: the name as bound, a str as the hand-over's server gives its own
            self.address = self.address.decode()
        self._listener.listen(8)
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.socket(self._family, socket.SOCK_STREAM)
            server.connect(self._upstream)
            self.sent.append(bytearray())
            ends = (client, server)
            threading.Thread(
                target=_pump,
                args=(client, server, self.sent[-1], self._flips[0], ends),
                daemon=True,
            ).start()
            threading.Thread(
                target=_pump, args=(server, client, bytearray(), self._flips[1], ends), daemon=True
            ).start()


def _pump(
    src: socket.socket,
    dst: socket.socket,
    record: bytearray,
    flip: int | None,
    ends: tuple[socket.socket, socket.socket],
) -> None:
    """Copy ``src`` to ``dst`` until either end closes, then close both ends."""
    try:
        while chunk := bytearray(src.recv(1 << 16)):
            offset = len(record)
            record += chunk
            if flip is not None and offset <= flip < offset + len(chunk):
                chunk[flip - offset] ^= 0x01
            dst.sendall(chunk)
    except OSError:
        pass
    for end in ends:
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)


def read_to_close(s: socket.socket) -> bytes:
    """What ``s`` receives until the other end closes it; TimeoutError where it does not
    within the socket's timeout."""
    got = bytearray()
    try:
        while chunk := s.recv(1 << 16):
            got += chunk
    except ConnectionResetError:  # closed with what this end wrote unread
        pass
    return bytes(got)
