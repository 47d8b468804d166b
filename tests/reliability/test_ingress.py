"""`vifusion serve` killed with SIGKILL (as the OOM killer does), then started again on the same
port: its HAProxy ingress must go with it (serve/_ingress.py), or it keeps the port, answers
every request with 500, and the next start cannot bind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import free_port
from tests.serve.test_ingress import admin_socket, listening, serving

ROOT = Path(__file__).resolve().parents[2]
START_S = 300  # a start loads the models; on 2 busy cores it can take minutes


def start(data: Path, port: int, env: dict[str, str], log: Path) -> subprocess.Popen:
    """`vifusion serve` on ``port``, once it says it is serving. Its stdin is /dev/null, as
    systemd, a script's `vifusion serve &` or nohup give it: so started, Serve's HAProxy
    outlived a killed service (with the test runner's stdin, it happened to die with it)."""
    command = [sys.executable, "-m", "vifusion.cli", "serve", "--data-dir", str(data)]
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [*command, "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    deadline = time.monotonic() + START_S
    while "ViFusion is serving." not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"vifusion serve did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)
    return proc


def settled(port: int, quiet_s: float = 10.0, timeout_s: float = 120.0) -> psutil.Process:
    """The HAProxy on ``port`` once Serve has stopped reloading it (the same one ``quiet_s``
    on end): a service in use, not one killed mid-start, whose HAProxy went with it."""
    deadline = time.monotonic() + timeout_s
    current, since = serving(port), time.monotonic()
    while time.monotonic() - since < quiet_s:
        if time.monotonic() > deadline:
            raise AssertionError(f"HAProxy on {port} still reloading after {timeout_s} s")
        time.sleep(0.5)
        now = serving(port)
        if now.pid != current.pid:
            current, since = now, time.monotonic()
    return current


def released(port: int, timeout_s: float = 60.0) -> bool:
    """Whether nothing listens on 127.0.0.1:``port`` any more, or within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


@pytest.mark.slow
def test_a_killed_service_takes_its_ingress_along_and_starts_again_on_its_port(tmp_path):
    port, stats, metrics = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "VIFUSION_"))}
    env |= {
        "PYTHONPATH": str(ROOT),
        "VIFUSION_INGRESS_STATS_PORT": str(stats),
        "VIFUSION_INGRESS_METRICS_PORT": str(metrics),
        "VIFUSION_INGRESS_FALLBACK_PORT": str(free_port()),
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2",  # a quicker clean stop at the end
    }
    data = tmp_path / "data"
    services: list[subprocess.Popen] = []
    try:
        services.append(start(data, port, env, tmp_path / "first.log"))
        haproxy = settled(port)
        # HAProxy's own pages, turned on here, listen on loopback only.
        assert listening(haproxy) == {("127.0.0.1", p) for p in (port, stats, metrics)}
        files = admin_socket(haproxy).parent.parent  # HAProxy's files (serve/_ingress.py)
        services[0].kill()
        services[0].wait()
        assert released(port), "the ingress outlived its service"
        services.append(start(data, port, env, tmp_path / "second.log"))
        assert not files.exists()  # the files the killed one left, removed by the new start
        key = (data / "api_key").read_text().strip()
        answer = httpx.post(
            f"http://127.0.0.1:{port}/v1/search",
            json={"text": "a kitchen"},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["results"] == []  # nothing indexed: an empty page, not a 500
        services[1].send_signal(signal.SIGTERM)
        assert services[1].wait(timeout=120) == 0
        assert released(port), "the ingress outlived its service's clean stop"
    finally:  # whatever a failed assertion left running
        for service in services:
            service.kill()
        if not released(port, timeout_s=0):
            serving(port).kill()
