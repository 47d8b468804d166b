"""Where a running `vifusion serve` answers for a data dir: ``DATA_DIR/service.json``.

`vifusion serve` writes it (its URL and pid) once the app is up and removes it when it
stops. The CLI then asks that service instead of opening the data dir itself: the service
holds the writer lock, and its shards and models are already loaded. A file left by a
killed service is ignored, because its pid is gone or its ``/healthz`` does not answer.
"""

from __future__ import annotations

import json
import os
import ssl
from pathlib import Path

from vifusion._files import whole_file
from vifusion.config import Config
from vifusion.datadir import API_KEY, SERVICE

_HEALTH_TIMEOUT_S = 0.5  # a live service on this machine answers /healthz in milliseconds


def announce(data_dir: Path, host: str, port: int, certfile: Path | None = None) -> None:
    """Say that this process serves ``data_dir`` at ``host:port`` (atomically: whole or absent);
    ``certfile``: over HTTPS only, with this certificate, which local clients pin."""
    if host in ("0.0.0.0", "::", ""):  # listening everywhere: reachable on loopback
        host = "127.0.0.1"
    shown = f"[{host}]" if ":" in host else host
    scheme = "http" if certfile is None else "https"
    info: dict = {"url": f"{scheme}://{shown}:{port}", "pid": os.getpid()}
    if certfile is not None:
        info["certfile"] = str(Path(certfile).resolve())
    with whole_file(data_dir / SERVICE) as f:
        f.write(json.dumps(info).encode())


def verify(data_dir: Path) -> ssl.SSLContext | bool:
    """How a local client checks the announced service: True (the system's CAs) over HTTP, or
    a context that trusts exactly the certificate it serves. Host names are not checked: a
    user's certificate names the public host, and the CLI dials loopback."""
    try:
        return _pinned(json.loads((data_dir / SERVICE).read_text()).get("certfile"))
    except (OSError, ValueError, AttributeError):
        return True


def _pinned(certfile: str | None) -> ssl.SSLContext | bool:
    if not certfile:
        return True
    ctx = ssl.create_default_context(cafile=certfile)
    ctx.check_hostname = False
    ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # the served certificate is the anchor
    return ctx


def withdraw(data_dir: Path) -> None:
    """Remove this process's announcement (another process's is left alone)."""
    path = data_dir / SERVICE
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def running_url(data_dir: Path) -> str | None:
    """The URL of the live service announced for ``data_dir``, or None."""
    try:
        info = json.loads((data_dir / SERVICE).read_text())
        url, pid = str(info["url"]), int(info["pid"])
        os.kill(pid, 0)  # ProcessLookupError: it died without withdrawing
    except PermissionError:  # alive, another user's process: ask it all the same
        pass
    except (OSError, ValueError, KeyError, TypeError):
        return None
    import httpx

    try:
        pin = _pinned(info.get("certfile"))
        ok = httpx.get(f"{url}/healthz", timeout=_HEALTH_TIMEOUT_S, verify=pin).status_code == 200
    except (httpx.HTTPError, OSError):  # OSError: the pinned certificate is gone
        return None
    return url if ok else None


def api_key(cfg: Config) -> str | None:
    """The key a local client uses: the configured one, else the data dir's key file."""
    if cfg.api_key is not None:
        return cfg.api_key.strip()
    try:
        return (cfg.data_dir / API_KEY).read_text().strip() or None
    except OSError:
        return None
