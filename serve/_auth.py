"""Who may call ``/v1``: the API key, then the rate limit per client, checked before
routing, so a caller without the key learns nothing (not even that its request was malformed);
and who may fetch ``/media/{id}``: a URL the service signed, then its own rate limit.

Use ``GATE`` through this module (``_auth.GATE``): Serve pickles the deployment class by
value, and a name imported into app.py would be copied, not shared with the middleware.
"""

import os
import re
import secrets
from pathlib import Path
from urllib.parse import parse_qsl

from fastapi.responses import JSONResponse

from serve._errors import ApiError, error_response
from serve._ratelimit import RateLimiter
from serve._signed import MediaSigner
from vifusion import datadir
from vifusion.config import Config

MIN_KEY_CHARS = 32  # a generated key has 43 (32 random bytes)
# Thumbnails and media have their own budget: one page of results fetches a thumbnail per result.
_MEDIA = re.compile(r"/v1/videos/[^/]+/(thumbnail|media)")
_SIGNED = re.compile(r"/media/([0-9]{1,19})")  # the only paths the service signs


class WeakKey(ValueError):
    """The configured or stored API key is too short to keep anyone out."""


def api_key(cfg: Config) -> str:
    """``cfg.api_key`` if set, else ``DATA_DIR/api_key``, generated on first start.

    A key under ``MIN_KEY_CHARS`` characters is refused (``WeakKey``, saying what to do): a
    short key is guessable, and an empty one would let ``Authorization: Bearer `` in. The file
    is written atomically (temp file, fsync, rename, mode 0600), so a crash leaves no file or
    the whole key. A file that is empty or whitespace-only (an older version's crash mid-write,
    a full disk) holds no key anyone could have been given: a new one is generated. A short
    key in the file was put there by someone: refused, the file left as it is.
    """
    if cfg.api_key is not None:
        key = (
            cfg.api_key.strip()
        )  # as the bearer token is read: a stray newline must not lock everyone out
        if len(key) < MIN_KEY_CHARS:
            raise WeakKey(
                f"the configured API key (VIFUSION_API_KEY or api_key) has {len(key)} characters; "
                f"it needs at least {MIN_KEY_CHARS}: set a longer one, or unset it to use a generated one"
            )
        return key
    path = cfg.data_dir / datadir.API_KEY
    try:
        found: str | None = path.read_text()
    except FileNotFoundError:
        found = None
    key = (found or "").strip()
    if not key:
        # Several replicas may start at once: the first key written wins, and every replica
        # uses the one in the file (a replica holding a key of its own would refuse the rest).
        # Only a file that was there, empty, when read is replaced: one that appeared since
        # is another replica's key.
        _write_private(path, secrets.token_urlsafe(32) + "\n", replace=found is not None)
        key = path.read_text().strip()
    elif len(key) < MIN_KEY_CHARS:
        raise WeakKey(
            f"the API key in {path} has {len(key)} characters; it needs at least {MIN_KEY_CHARS}: "
            f"delete the file to have a new key generated at the next start, or write a longer one there"
        )
    return key


def _write_private(path: Path, text: str, replace: bool = True) -> None:
    """Write ``text`` to ``path``, readable by its owner only, all or nothing; without
    ``replace``, only where no ``path`` exists yet (another writer's file stays)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask, or a stale temp file's mode
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    if replace:
        os.replace(tmp, path)
    else:
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a crash
    finally:
        os.close(dir_fd)


def client_address(scope: dict) -> str:
    """The address a request is charged to: the client's, never one it wrote itself.

    Behind the HAProxy ingress (``serve_tuned``) the TCP peer is HAProxy, on loopback; our
    launcher (``serve/_ingress.py``) makes HAProxy set ``X-Forwarded-For`` to the peer it saw,
    replacing whatever the client sent, and uvicorn, which serves the replica, takes that
    header from a loopback peer as the client (``scope["client"]``). Behind Serve's Python
    proxy, the peer a remote client connects from is not loopback: uvicorn ignores its
    header. So ``scope["client"]`` is the client's own address either way."""
    return (scope.get("client") or ("",))[0]


class Gate:
    """The key check, then a token bucket per client: per (key, ``client_address``), one
    budget for thumbnails and media and another for every other ``/v1`` call. A signed media
    URL is checked before it is charged, and each valid one has its own bucket."""

    def __init__(self) -> None:
        self._key: bytes | None = None
        self.signer: MediaSigner | None = None
        self.limiter = RateLimiter(1, 1)
        self.media_limiter = RateLimiter(1, 1)

    def configure(self, key: str, cfg: Config) -> None:
        if len(key) < MIN_KEY_CHARS:
            raise WeakKey(f"an API key needs at least {MIN_KEY_CHARS} characters, got {len(key)}")
        self._key = key.encode()
        self.signer = MediaSigner(key, cfg.media_url_ttl_s)
        self.set_limits(cfg)

    def set_limits(self, cfg: Config) -> None:
        self.limiter.configure(cfg.rate_limit_rps, cfg.rate_limit_burst)
        self.media_limiter.configure(cfg.rate_limit_media_rps, cfg.rate_limit_media_burst)

    def check(self, authorization: str, client: str, path: str) -> JSONResponse | None:
        """None if the request may go on, else the 401 or 429 to answer. ``client`` is the
        remote address, ``path`` the one the router matches (without a route prefix)."""
        scheme, _, given = authorization.partition(" ")
        given = given.strip()
        if (
            self._key is None
            or not given
            or scheme.lower() != "bearer"
            or not secrets.compare_digest(given.encode(), self._key)
        ):
            return error_response(
                401,
                "unauthorized",
                "missing or wrong API key (Authorization: Bearer <key>)",
                {"WWW-Authenticate": "Bearer"},
            )
        limiter = self.media_limiter if _MEDIA.fullmatch(path) else self.limiter
        return self._limited(limiter.take((given, client)))

    def check_signed(self, path: str, query: bytes, client: str) -> JSONResponse | None:
        """None if the signed media URL ``path?query`` (``/media/{id}?exp&sig``, no key) may
        be fetched now, else its 403 or 429. The signature is checked first and only a URL
        the service signed is charged, to a bucket of its own (per URL and address): made-up
        URLs spend no one's budget, and a player seeking through its URL spends only that
        URL's, so no client can stop another's player. This is the route's only check."""
        found = _SIGNED.fullmatch(path)
        params = dict(parse_qsl(query.decode("latin-1"), keep_blank_values=True))  # last wins
        sig = params.get("sig")
        try:
            if found is None or self.signer is None:
                raise ApiError(403, "bad_signature", "this media URL is not one the service signed")
            self.signer.verify(int(found[1]), params.get("exp"), sig)
        except ApiError as e:
            return error_response(e.status, e.code, e.message)
        return self._limited(self.media_limiter.take((sig, client)))

    @staticmethod
    def _limited(wait: float) -> JSONResponse | None:
        if not wait:
            return None
        return error_response(
            429,
            "rate_limited",
            f"too many requests; retry in {wait:.2f} s",
            {"Retry-After": str(max(1, int(wait + 0.999)))},
        )


GATE = Gate()  # one per replica process
