"""The HAProxy ingress in front of the service (serve/_ingress.py) opens the service's port and
nothing else, and its admin socket (level admin: it can turn backends off) is this user's only."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import psutil
import pytest

from serve._ingress import private_config


def serving(port: int) -> psutil.Process:
    """The HAProxy that listens on 127.0.0.1:``port`` (not one that a reload displaced, still
    closing connections to it)."""
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] != "haproxy":
            continue
        try:
            if ("127.0.0.1", port) in listening(proc):
                return proc
        except psutil.Error:  # gone, or another user's
            continue
    raise AssertionError(f"no HAProxy listens on {port}")


def listening(proc: psutil.Process) -> set[tuple[str, int]]:
    return {
        (c.laddr.ip, c.laddr.port)
        for c in proc.net_connections("inet")
        if c.status == psutil.CONN_LISTEN
    }


def admin_socket(proc: psutil.Process) -> Path:
    """The admin socket that the config HAProxy runs with names."""
    args = proc.cmdline()
    config = Path(args[args.index("-f") + 1]).read_text()
    return Path(
        next(ln.split()[2] for ln in config.splitlines() if ln.split()[:2] == ["stats", "socket"])
    )


def test_the_ingress_listens_on_the_service_port_only_and_its_admin_socket_is_private(live):
    port = int(live.url.rsplit(":", 1)[1])
    haproxy = serving(port)
    # The session's settings are the defaults: no statistics page, no exporter.
    assert listening(haproxy) == {("127.0.0.1", port)}
    sock = admin_socket(haproxy)
    mode = sock.stat()
    assert stat.S_ISSOCK(mode.st_mode) and stat.S_IMODE(mode.st_mode) == 0o600
    assert mode.st_uid == os.getuid()
    run_dir = sock.parent.parent  # Ray adds a folder per node
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700 and run_dir.stat().st_uid == os.getuid()
    assert live.vf.health()["vectors"] == live.vectors  # and the service answers through it


@pytest.mark.parametrize(
    "line",
    ["  bind [::]:8404", "  bind unix@/tmp/stats", "  bind 10.0.0.1:8404,[::]:8405"],
    ids=["ipv6", "unix", "two addresses"],
)
def test_a_listener_of_another_shape_stops_haproxy_rather_than_open_it(line):
    config = f"global\n    stats socket /r/admin.sock mode 666 level admin\nlisten stats\n{line}\n"
    with pytest.raises(ValueError, match="unknown shape"):
        private_config(config)


def test_the_http_frontend_names_the_client_haproxy_saw_in_place_of_the_clients_own():
    config = (
        "frontend http_frontend\n    bind 127.0.0.1:8000\n    default_backend app\n"
        "frontend grpc_frontend\n    bind 127.0.0.1:9000 proto h2\n"
    )
    http, grpc = private_config(config).split("frontend grpc_frontend")
    lines = [ln.strip() for ln in http.splitlines()]
    assert lines[:3] == [
        "frontend http_frontend",
        "bind 127.0.0.1:8000",
        "http-request set-header X-Forwarded-For %[src]",  # set, not added to the client's
    ]
    assert "X-Forwarded-For" not in grpc
