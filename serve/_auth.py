"""Who may call ``/v1``: an API key, then the rate limit per client, checked before
routing, so a caller without a key learns nothing (not even that its request was malformed);
what a key's scope lets it call (``ROUTE_SCOPES``, checked once the route is known); and who
may fetch ``/media/{id}``: a URL the service signed, for a key still live, then its own rate
limit.

Keys: the bootstrap key (``VIFUSION_API_KEY`` or ``DATA_DIR/api_key``) is an admin key;
the stored keys (``vf_<id>_<secret>``, vifusion/catalog/_keys.py) are looked up in the
catalog by id, each record kept at most ``KEY_CACHE_S``: a key revoked or expired, on any
replica or by the command line, is refused by every replica within a second, without a
restart, and a key in use costs one catalog read a second, not one a request.

Use ``GATE`` through this module (``_auth.GATE``): Serve pickles the deployment class by
value, and a name imported into app.py would be copied, not shared with the middleware.
"""

import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl

from fastapi import Request
from fastapi.responses import JSONResponse

from serve._errors import ApiError, error_response
from serve._ratelimit import RateLimiter
from serve._signed import MediaSigner
from vifusion import datadir
from vifusion.catalog import ApiKey, Catalog, parse_key, scope_allows
from vifusion.config import Config

MIN_KEY_CHARS = 32  # a generated key has 43 (32 random bytes)
# Thumbnails and media have their own budget: one page of results fetches a thumbnail per result.
_MEDIA = re.compile(r"/v1/videos/[^/]+/(thumbnail|media)")
_SIGNED = re.compile(r"/media/([0-9]{1,19})")  # the only paths the service signs
_KEY_ID = re.compile(r"[0-9a-f]{12}")  # a stored key's id, as a signed URL names it
KEY_CACHE_S = 0.5  # how long a replica trusts a stored key's record before reading it again
_KEY_CACHE_MAX = 10_000  # records kept at most (a flood of made-up ids empties it, no more)
CALLER = "vifusion.caller"  # the request scope's entry the gate leaves for the scope check

# The least scope each /v1 route needs, by (method, route template): the one table of who may
# call what. search: search, read videos, transcripts, thumbnails and media, sign media URLs;
# ingest: also add videos, retry them and read jobs; admin: everything, deleting, keys and
# webhooks too.
# A /v1 route missing here needs admin: a new route stays closed until it is given its scope.
ROUTE_SCOPES: dict[tuple[str, str], str] = {
    ("POST", "/v1/search"): "search",
    ("GET", "/v1/videos"): "search",
    ("GET", "/v1/videos/{video_id}"): "search",
    ("GET", "/v1/videos/{video_id}/thumbnail"): "search",
    ("GET", "/v1/videos/{video_id}/media"): "search",
    ("GET", "/v1/videos/{video_id}/transcript"): "search",
    ("POST", "/v1/videos/{video_id}/media-url"): "search",
    ("POST", "/v1/videos"): "ingest",
    ("POST", "/v1/videos/{video_id}/retry"): "ingest",
    ("GET", "/v1/jobs/{job_id}"): "ingest",
    ("DELETE", "/v1/videos/{video_id}"): "admin",
    ("POST", "/v1/keys"): "admin",
    ("GET", "/v1/keys"): "admin",
    ("DELETE", "/v1/keys/{key_id}"): "admin",
    ("POST", "/v1/webhooks"): "admin",
    ("GET", "/v1/webhooks"): "admin",
    ("DELETE", "/v1/webhooks/{hook_id}"): "admin",
    ("POST", "/v1/reindex"): "admin",
    ("GET", "/v1/reindex"): "admin",
    ("GET", "/v1/collections"): "search",
    ("DELETE", "/v1/collections/{name}"): "admin",
    ("GET", "/v1/languages"): "search",
}


@dataclass(frozen=True)
class Caller:
    """Who a /v1 request comes from: a stored key's id (None: the bootstrap key), its scope,
    and the collections it is limited to (None: every one; serve/_collections.py)."""

    key_id: str | None
    scope: str
    collections: tuple[str, ...] | None = None


BOOTSTRAP = Caller(None, "admin")


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
        self.keys: StoredKeys | None = None  # none until the replica's catalog is open

    def use_keys(self, catalog: Catalog) -> None:
        """Take the stored keys from ``catalog`` (until then only the bootstrap key opens)."""
        self.keys = StoredKeys(catalog)

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
        """None if the request may go on, else the 401 or 429 to answer (``admit``)."""
        admitted = self.admit(authorization, client, path)
        return admitted if isinstance(admitted, JSONResponse) else None

    def admit(self, authorization: str, client: str, path: str) -> Caller | JSONResponse:
        """The caller if the request may go on, else the 401, 429 or 503 to answer.
        ``client`` is the remote address, ``path`` the one the router matches (without a
        route prefix)."""
        scheme, _, given = authorization.partition(" ")
        given = given.strip()
        caller: Caller | None = None
        if self._key is not None and given and scheme.lower() == "bearer":
            if secrets.compare_digest(given.encode(), self._key):
                caller = BOOTSTRAP
            elif (found := parse_key(given)) is not None and self.keys is not None:
                try:
                    record = self.keys.get(found[0])
                except Exception as e:  # the catalog's server is down: no one can be told apart
                    return error_response(
                        503, "unavailable", f"keys cannot be checked now ({type(e).__name__})"
                    )
                if record is not None and record.opens(found[1]) and record.live():
                    caller = Caller(record.id, record.scope, record.collections)
        if caller is None:
            return error_response(
                401,
                "unauthorized",
                "missing, wrong, revoked or expired API key (Authorization: Bearer <key>)",
                {"WWW-Authenticate": "Bearer"},
            )
        limiter = self.media_limiter if _MEDIA.fullmatch(path) else self.limiter
        limited = self._limited(limiter.take((given, client)))
        return caller if limited is None else limited

    def check_signed(self, path: str, query: bytes, client: str) -> JSONResponse | None:
        """None if the signed media URL ``path?query`` (``/media/{id}?exp&sig``, no key) may
        be fetched now, else its 403 or 429. The signature is checked first and only a URL
        the service signed is charged, to a bucket of its own (per URL and address): made-up
        URLs spend no one's budget, and a player seeking through its URL spends only that
        URL's, so no client can stop another's player. This is the route's only check."""
        found = _SIGNED.fullmatch(path)
        params = dict(parse_qsl(query.decode("latin-1"), keep_blank_values=True))  # last wins
        sig, key_id = params.get("sig"), params.get("key")
        try:
            if (
                found is None
                or self.signer is None
                or (key_id is not None and not _KEY_ID.fullmatch(key_id))
            ):
                raise ApiError(403, "bad_signature", "this media URL is not one the service signed")
            self.signer.verify(int(found[1]), params.get("exp"), sig, key_id=key_id)
            if key_id is not None:
                record = None if self.keys is None else self.keys.get(key_id)
                if record is None or not record.live():
                    raise ApiError(
                        403, "key_revoked", "the key that made this media URL is revoked or expired"
                    )
        except ApiError as e:
            return error_response(e.status, e.code, e.message)
        except Exception as e:  # the catalog's server is down
            return error_response(
                503, "unavailable", f"keys cannot be checked now ({type(e).__name__})"
            )
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


class StoredKeys:
    """The catalog's keys as a replica's gate reads them: each record at most ``KEY_CACHE_S``
    old, an unknown id too (as None). The gate runs on the event loop: a lookup is one
    primary-key read, paid once per key a ``KEY_CACHE_S``."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog
        self._records: dict[str, tuple[float, ApiKey | None]] = {}
        self._lock = threading.Lock()

    def get(self, key_id: str) -> ApiKey | None:
        now = time.monotonic()
        with self._lock:
            held = self._records.get(key_id)
        if held is not None and now - held[0] < KEY_CACHE_S:
            return held[1]
        record = self._catalog.api_key(key_id)
        with self._lock:
            if len(self._records) >= _KEY_CACHE_MAX:
                self._records.clear()
            self._records[key_id] = (now, record)
        return record


def caller(request: Request) -> Caller:
    """The key a /v1 request came with, as the gate found it."""
    return request.scope[CALLER]


def needs_scope(request: Request) -> None:
    """Every route's first dependency: a /v1 route refuses a key whose scope is below the one
    ``ROUTE_SCOPES`` gives it (403 ``forbidden_scope``, naming the scope needed). Routes
    outside /v1 have no key: the gate checked them its own way before routing."""
    template = getattr(request.scope.get("route"), "path", "")
    if not (template == "/v1" or template.startswith("/v1/")):
        return
    method = "GET" if request.method == "HEAD" else request.method
    needed = ROUTE_SCOPES.get((method, template), "admin")
    who = request.scope.get(CALLER)
    if who is None:  # the gate did not run: never let such a request through
        raise ApiError(401, "unauthorized", "missing API key (Authorization: Bearer <key>)")
    if not scope_allows(who.scope, needed):
        raise ApiError(
            403,
            "forbidden_scope",
            f"{method} {template} needs a key of scope {needed}; this key's scope is {who.scope}",
        )


GATE = Gate()  # one per replica process
