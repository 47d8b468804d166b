"""The API key: how it is made and read, and the gate that checks it before routing, also
when the app runs under a route prefix. Real files, a real uvicorn on a loopback port."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import threading
import time

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from starlette.routing import Mount

from serve import _auth
from serve._auth import api_key
from serve._front import Front
from vifusion.cli import parser as cli
from vifusion.config import Config

from .conftest import KEY, free_port

# -- the key file ---------------------------------------------------------------------------


def test_first_start_writes_a_long_key_only_its_owner_can_read(tmp_path):
    cfg = Config(data_dir=tmp_path / "data")
    key = api_key(cfg)
    path = tmp_path / "data" / "api_key"
    assert len(key) >= 32
    assert path.read_text().strip() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(tmp_path / "data") == ["api_key"]  # no temp file left behind
    assert api_key(cfg) == key  # the next start reads the same key


def _first_start(data_dir, barrier, keys) -> None:
    barrier.wait()
    keys.put(api_key(Config(data_dir=data_dir)))


def test_replicas_starting_at_once_all_use_the_one_key_in_the_file(tmp_path):
    """API replicas start together on a fresh data dir: each must end up with the key the file
    holds, or a client with that key would be refused by the others."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    barrier, keys = ctx.Barrier(8), ctx.Queue()
    starts = [ctx.Process(target=_first_start, args=(tmp_path, barrier, keys)) for _ in range(8)]
    for p in starts:
        p.start()
    for p in starts:
        p.join(30)
    held = {keys.get(timeout=5) for _ in starts}
    assert held == {(tmp_path / "api_key").read_text().strip()}
    assert os.listdir(tmp_path) == ["api_key"]


@pytest.mark.parametrize("left", ["", " \n\t"])
def test_a_key_file_left_empty_by_a_crash_is_written_again(tmp_path, left):
    """Empty or whitespace-only: no key anyone could hold, so a new one, never the key ""."""
    cfg = Config(data_dir=tmp_path)
    (tmp_path / "api_key").write_text(left)
    key = api_key(cfg)
    assert len(key) >= 32
    assert (tmp_path / "api_key").read_text().strip() == key
    assert stat.S_IMODE((tmp_path / "api_key").stat().st_mode) == 0o600


def test_a_short_key_in_the_file_is_refused_with_what_to_do(tmp_path):
    (tmp_path / "api_key").write_text("hunter2\n")
    with pytest.raises(ValueError) as e:
        api_key(Config(data_dir=tmp_path))
    said = str(e.value)
    assert str(tmp_path / "api_key") in said and "32" in said and "delete" in said, said
    assert "hunter2" not in said  # a secret, however weak, is not echoed into logs
    assert (tmp_path / "api_key").read_text() == "hunter2\n"  # left for its owner to fix


def test_a_short_configured_key_is_refused(tmp_path):
    with pytest.raises(ValueError, match="VIFUSION_API_KEY.*32"):
        api_key(Config(data_dir=tmp_path, api_key="short"))
    with pytest.raises(ValueError, match="32"):
        api_key(Config(data_dir=tmp_path, api_key=" " * 40))
    assert api_key(Config(data_dir=tmp_path, api_key=KEY)) == KEY
    assert api_key(Config(data_dir=tmp_path, api_key=KEY + "\n")) == KEY  # pasted with its newline
    assert not (tmp_path / "api_key").exists()  # a configured key writes no file


def test_serve_with_a_short_key_exits_2_with_the_reason(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VIFUSION_API_KEY", "short")
    code = cli.main(["serve", "--data-dir", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert code == 2
    assert "API key" in err and "32" in err and "Traceback" not in err, err


# -- the gate -------------------------------------------------------------------------------


@pytest.fixture
def gate(monkeypatch) -> _auth.Gate:
    """A gate of this test's own, with the tests' key (the middleware reads ``_auth.GATE``)."""
    gate = _auth.Gate()
    gate.configure(KEY, Config())
    monkeypatch.setattr(_auth, "GATE", gate)
    return gate


@pytest.mark.parametrize(
    "header", ["", "Bearer", "Bearer ", "Bearer  ", "bearer\t", "Basic " + KEY, "Bearer x"]
)
def test_no_key_or_a_wrong_one_is_refused(gate, header):
    denied = gate.check(header, "127.0.0.1", "/v1/videos")
    assert denied is not None and denied.status_code == 401


def test_the_gate_takes_no_short_key():
    with pytest.raises(ValueError, match="32"):
        _auth.Gate().configure("", Config())


def probe() -> FastAPI:
    """The front layer over two routes: one under /v1 (gated), one not."""
    app = FastAPI()
    app.get("/v1/echo")(lambda: {"ok": True})
    app.get("/open")(lambda: {"ok": True})
    app.add_middleware(Front)
    return app


@contextlib.contextmanager
def serving(app, **options):
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning", **options)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.mark.parametrize("how", ["root_path", "mount"])
def test_the_key_is_checked_under_a_route_prefix(gate, how):
    """Under a prefix, ``scope["path"]`` holds the prefix and ``scope["root_path"]`` names it;
    the router matches what follows the prefix, and so must the gate. uvicorn's ``root_path``
    (behind a proxy that strips the prefix) prepends it to the path it received; a Mount, like
    Serve's ``route_prefix``, keeps the path the client sent."""
    if how == "root_path":
        server, sent = serving(probe(), root_path="/prefix"), ""  # the proxy stripped /prefix
    else:
        outer = FastAPI()
        outer.router.routes.append(Mount("/prefix", app=probe()))
        server, sent = serving(outer), "/prefix"
    with server as url, httpx.Client(base_url=url + sent, timeout=30) as client:
        assert client.get("/v1/echo").status_code == 401
        assert client.get("/v1/echo", headers={"Authorization": "Bearer"}).status_code == 401
        r = client.get("/v1/echo", headers={"Authorization": f"Bearer {KEY}"})
        assert r.status_code == 200 and r.json() == {"ok": True}
        assert client.get("/open").status_code == 200


def status_of(url: str, path: str, header: bytes) -> int:
    """The status of a GET sent byte for byte (httpx will not send a header value ending in a space)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(
            b"GET "
            + path.encode()
            + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            + header
            + b"\r\n"
        )
        head = s.makefile("rb").readline()
    return int(head.split()[1])


def test_live_an_empty_bearer_is_refused(live):
    for path in ("/v1/videos", f"/v1/videos/{live.ids['kitchen.mp4']}", "/v1/jobs/1"):
        for header in (
            b"Authorization: Bearer \r\n",
            b"Authorization: Bearer\r\n",
            b"Authorization:\r\n",
            b"",
        ):
            assert status_of(live.url, path, header) == 401, (path, header)
    assert status_of(live.url, "/v1/videos", f"Authorization: Bearer {KEY}\r\n".encode()) == 200
