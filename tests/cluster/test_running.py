"""Finding the service that serves a data dir: a live one is found, a dead or silent one is not."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from vifusion.cluster.running import announce, running_url, withdraw
from vifusion.datadir import SERVICE


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_a_live_service_is_found_until_it_withdraws(tmp_path, server):
    announce(tmp_path, "0.0.0.0", server.server_port)
    assert running_url(tmp_path) == f"http://127.0.0.1:{server.server_port}"
    withdraw(tmp_path)
    assert not (tmp_path / SERVICE).exists()
    assert running_url(tmp_path) is None


def test_a_dead_process_announcement_is_ignored(tmp_path, server):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (tmp_path / SERVICE).write_text(
        json.dumps({"url": f"http://127.0.0.1:{server.server_port}", "pid": int(dead.stdout)})
    )
    assert running_url(tmp_path) is None


def test_a_service_that_does_not_answer_healthz_is_ignored(tmp_path, server):
    server.RequestHandlerClass = type("Sick", (_Health,), {"status": 503})
    announce(tmp_path, "127.0.0.1", server.server_port)
    assert running_url(tmp_path) is None


def test_another_process_announcement_is_not_withdrawn(tmp_path):
    (tmp_path / SERVICE).write_text(json.dumps({"url": "http://127.0.0.1:1", "pid": 1}))
    withdraw(tmp_path)
    assert (tmp_path / SERVICE).exists()


@pytest.mark.parametrize("text", ["", "{", "[]", '{"url": "x"}'])
def test_a_damaged_announcement_is_ignored(tmp_path, text):
    (tmp_path / SERVICE).write_text(text)
    assert running_url(tmp_path) is None
