"""HTTPS at the ingress: the certificate it serves, and how the local CLI trusts it.

A real TLS server on loopback (the standard library's, serving /healthz) stands in for the
ingress: what is under test is the certificate handling, not Serve's proxy (the cluster test,
tests/deploy/test_cluster.py, runs the real one over HTTPS)."""

from __future__ import annotations

import http.server
import ssl
import threading
from pathlib import Path

import httpx
import pytest

from serve._tls import ingress_pair
from vifusion.cluster import running as _running
from vifusion.config import Config


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the standard library's name
        self.send_response(200 if self.path == "/healthz" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def https_server():
    """start(certfile, keyfile) -> port of a TLS server on 127.0.0.1 answering /healthz."""
    servers = []

    def start(certfile: Path, keyfile: Path) -> int:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certfile, keyfile)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server.server_address[1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_self_signed_certificate_is_made_once_and_kept(tmp_path):
    cfg = Config(data_dir=tmp_path, https=True)
    assert cfg.serves_https
    crt, key = ingress_pair(cfg)
    assert (crt.parent, crt.name, key.name) == (tmp_path / "tls", "ingress.crt", "ingress.key")
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert oct(crt.parent.stat().st_mode & 0o777) == "0o700"
    first = crt.read_bytes()
    assert ingress_pair(cfg) == (crt, key)  # a restart serves the same certificate
    assert crt.read_bytes() == first


def test_the_users_own_pair_is_used_as_given(tmp_path):
    mine = ingress_pair(Config(data_dir=tmp_path / "elsewhere", https=True))
    cfg = Config(data_dir=tmp_path / "data", tls_certfile=mine[0], tls_keyfile=mine[1])
    assert cfg.serves_https
    assert ingress_pair(cfg) == mine
    assert not (tmp_path / "data" / "tls").exists()
    with pytest.raises(FileNotFoundError, match="tls_certfile"):
        ingress_pair(
            Config(data_dir=tmp_path, tls_certfile=tmp_path / "no.crt", tls_keyfile=mine[1])
        )


def test_a_half_pair_is_refused():
    with pytest.raises(ValueError, match="tls_certfile and tls_keyfile go together"):
        Config(tls_certfile="/etc/ssl/x.crt")


def test_the_cli_finds_an_https_service_and_pins_its_certificate(tmp_path, https_server):
    data = tmp_path / "data"
    data.mkdir()
    crt, key = ingress_pair(Config(data_dir=data, https=True))
    port = https_server(crt, key)
    _running.announce(data, "127.0.0.1", port, crt)
    url = _running.running_url(data)
    assert url == f"https://127.0.0.1:{port}"
    # without the pin, the system's CAs refuse the self-signed certificate
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/healthz")
    assert httpx.get(f"{url}/healthz", verify=_running.verify(data)).status_code == 200


def test_the_pin_refuses_another_certificate_at_that_address(tmp_path, https_server):
    data, other = tmp_path / "data", tmp_path / "other"
    data.mkdir()
    other.mkdir()
    pinned = ingress_pair(Config(data_dir=data, https=True))[0]
    port = https_server(*ingress_pair(Config(data_dir=other, https=True)))  # an impostor
    _running.announce(data, "127.0.0.1", port, pinned)
    assert _running.running_url(data) is None  # not taken for the service
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"https://127.0.0.1:{port}/healthz", verify=_running.verify(data))


def test_a_plain_http_service_is_announced_as_before(tmp_path):
    _running.announce(tmp_path, "0.0.0.0", 8000)
    assert _running.verify(tmp_path) is True
    assert '"url": "http://127.0.0.1:8000"' in (tmp_path / _running.SERVICE).read_text()
