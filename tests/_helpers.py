"""Small fakes and helpers that tests in several folders share."""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from vifusion.comm import LinkStats
from vifusion.samples import talks

needs_espeak = pytest.mark.skipif(
    not talks.have_espeak(),
    reason="espeak-ng is not installed (Debian: apt-get install espeak-ng)",
)


def words(text: str) -> set[str]:
    """The words of ``text``, lower case, punctuation gone: what a transcript is compared by."""
    return set(re.findall(r"[a-z0-9]+", text.lower()))


class Clock:
    """A clock that stands still until a test moves ``t`` (for code that takes a ``clock``)."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def link_stats(rate: float, **fields) -> LinkStats:
    """A link as LinkMonitor reports it: ``rate`` bytes/s delivered, on the path, as its
    capacity and uncompressed; a 10 ms round trip; nothing queued or in flight. ``fields``
    (LinkStats's) say otherwise."""
    return LinkStats(
        **{
            "delivery_rate": rate,
            "capacity": rate,
            "path_rate": rate,
            "logical_rate": rate,
            "min_rtt": 0.01,
            "queueing_delay": 0.0,
            "backlog_age": 0.0,
            "in_flight_bytes": 0,
            "in_flight": 0,
            "acked_bytes": 0,
            "acked_messages": 10,
            "service_s": 0.0,
            "per_message_s": 0.001,
        }
        | fields
    )


def refusal(build: Callable[..., object], **args) -> str:
    """The message of the ValueError that ``build(**args)`` raises (a test fails if none)."""
    with pytest.raises(ValueError) as err:
        build(**args)
    return str(err.value)


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A request handler that keeps its log of requests out of the test's output."""

    def log_message(self, *args) -> None:
        pass


@contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 answering with ``handler``, each request in a thread of
    its own; its base URL (``http://127.0.0.1:<port>``) while the block runs."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def final_status(catalog, job_id: str, timeout_s: float = 300) -> str:
    """The status a job ends in ("ready" or "failed"), polled from ``catalog`` (a service's
    or one opened on its data dir); TimeoutError if it is still running after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = catalog.get_job(job_id).status
        if status in ("ready", "failed"):
            return status
        time.sleep(0.3)
    raise TimeoutError(job_id)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`vifusion ARGV` run in this process: its exit status, stdout and stderr."""
    from vifusion.cli import parser as cli

    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def cli_process(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`vifusion ARGV` in a process of its own, as a user runs it: without this session's
    RAY_* variables, so it starts or finds Ray as a user's would; ``env`` added."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return subprocess.run(
        [sys.executable, "-m", "vifusion.cli", *argv],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=300,
    )


def json_from_bed(bed, argv: list[str], *, timeout: float, env: dict | None = None) -> dict:
    """Run ``argv`` in test-bed host 0 and wait for it; it must exit 0 (else the tail of its
    stderr is the failure) and print a JSON object as its last line, returned."""
    proc = bed.exec(0, argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])
