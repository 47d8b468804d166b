"""A webhook receiver on 127.0.0.1 for the tests: it records what it is sent, answers with
the status the test sets (200 by default), and checks each signature with the recipe the
README gives a receiver."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tests._helpers import QuietHandler


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def event(self) -> dict:
        return json.loads(self.body)


@dataclass
class Receiver:
    url: str
    status: int = 200
    got: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def events(self, kind: str | None = None) -> list[dict]:
        with self.lock:
            return [r.event for r in self.got if kind is None or r.event["type"] == kind]


def signed_by(secret: str, r: Received) -> bool:
    """The README's check, as a receiver writes it."""
    ts, sent = r.headers["x-vifusion-timestamp"], r.headers["x-vifusion-signature"]
    mac = hmac.new(secret.encode(), f"{ts}.".encode() + r.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(f"sha256={mac}", sent)


@contextmanager
def receiver(port: int = 0) -> Iterator[Receiver]:
    """A receiver on 127.0.0.1:``port`` (0: any free port), while the block runs."""
    box: list[Receiver] = []

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            rec = box[0]
            with rec.lock:
                status = rec.status
                if 200 <= status < 300:
                    rec.got.append(Received({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        box.append(Receiver(f"http://127.0.0.1:{server.server_address[1]}/hook"))
        yield box[0]
    finally:
        server.shutdown()
        server.server_close()
