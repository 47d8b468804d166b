"""The authenticated connections under the shard stream and the hand-over (``comm/wire.py``):
who gets in, and for how long a stranger is held. What each protocol refuses on the way is
in ``test_stream.py`` and ``tests/fusion/test_handoff.py``."""

import os
import socket
import threading

import pytest

from tests.comm._proxy import read_to_close
from vifusion.comm import wire


def echo_server(**limits) -> tuple[wire.Server, tuple[str, int], list[bytes]]:
    """A server that takes 5-byte messages and answers each with ``ok``; what it took."""
    took: list[bytes] = []

    def serve(channel: wire.Channel) -> None:
        message = bytearray(5)
        while channel.read_into(memoryview(message)) and channel.check():
            took.append(bytes(message))
            channel.send([b"ok"])

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    return wire.Server(listener, serve, "test", **limits), listener.getsockname(), took


def say(channel: wire.Channel, message: bytes) -> bytes:
    channel.send([message])
    reply = bytearray(2)
    assert channel.read_into(memoryview(reply)) and channel.check()
    return bytes(reply)


def test_strangers_that_never_speak_make_room_and_keep_no_client_out():
    server, address, took = echo_server(handshake_s=600, max_handshakes=4)
    strangers = [socket.create_connection(address, timeout=30) for _ in range(20)]
    client = wire.open_connection(socket.AF_INET, address, server.secret, timeout=30)
    assert say(client, b"hello") == b"ok"
    assert took == [b"hello"]
    for s in strangers[:16]:  # closed as newer ones came, each long before its deadline
        read_to_close(s)
    for s in strangers:
        s.close()
    client.close()
    server.close()


def test_a_stranger_that_says_nothing_is_closed_at_the_deadline():
    server, address, _ = echo_server(handshake_s=0.5)
    with socket.create_connection(address, timeout=30) as silent:
        assert len(read_to_close(silent)) == wire.NONCE_BYTES  # its challenge, unanswered
    server.close()


def test_a_server_that_cannot_prove_the_secret_is_refused():
    listener = socket.create_server(("127.0.0.1", 0))

    def impostor() -> None:  # answers as a server would, without the secret
        conn, _ = listener.accept()
        with conn:
            conn.sendall(os.urandom(wire.NONCE_BYTES))
            conn.recv(wire.NONCE_BYTES + wire.PROOF_BYTES, socket.MSG_WAITALL)
            conn.sendall(os.urandom(wire.PROOF_BYTES))
            conn.recv(1)

    threading.Thread(target=impostor, daemon=True).start()
    with pytest.raises(wire.Forged, match="did not prove"):
        wire.open_connection(
            socket.AF_INET, listener.getsockname(), os.urandom(wire.SECRET_BYTES), timeout=30
        )
    listener.close()
