"""API keys in the catalog, whichever database holds it: made, listed, looked up, revoked.

A key reads ``vf_<id>_<secret>``: ``id`` (12 hex digits) names its row and is not secret (it
is listed, and revoked by); ``secret`` is 32 random bytes, base64url. Only the SHA-256 of the
secret is stored: the key is shown once, when made, and never again. A secret of 256 random
bits needs no slow hash: no one can guess one from its digest. A key's row is found by its id
and its secret compared with the stored digest in constant time (``ApiKey.opens``).

A key has one scope (``SCOPES``, each allowing what the ones before it allow), and may be
limited to some collections (``collections``, a JSON list; NULL: every collection): it then
searches, adds, reads and deletes only videos of those (``serve/_collections.py``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
import uuid
from dataclasses import dataclass, field

from vifusion.catalog._collections import check_collections
from vifusion.catalog._database import Database, Row

SCOPES = ("search", "ingest", "admin")  # each allows all the earlier ones allow
PREFIX = "vf_"
_KEY = re.compile(r"vf_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
_COLUMNS = "id, name, scope, created_at, expires_at, revoked_at, secret_sha256, collections"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_key(text: str) -> tuple[str, str] | None:
    """A stored key's (id, secret) from the text a caller sent, None where it is no such key."""
    found = _KEY.fullmatch(text)
    return (found[1], found[2]) if found else None


def scope_allows(scope: str, needed: str) -> bool:
    """Whether a key of ``scope`` may do what ``needed`` allows."""
    return SCOPES.index(scope) >= SCOPES.index(needed)


@dataclass(frozen=True)
class ApiKey:
    """One stored key as listed (never the key itself)."""

    id: str
    name: str
    scope: str
    created_at: float
    expires_at: float | None
    revoked_at: float | None
    secret_sha256: str = field(repr=False, compare=False)
    collections: tuple[str, ...] | None = None  # the only ones it may reach; None: every one

    def live(self, now: float | None = None) -> bool:
        """Not revoked, and not past its expiry."""
        now = time.time() if now is None else now
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)

    def opens(self, secret: str) -> bool:
        """Whether ``secret`` is this key's (constant time)."""
        return hmac.compare_digest(_digest(secret).encode(), self.secret_sha256.encode())


def _key_from_row(row: Row) -> ApiKey:
    limited = row["collections"]
    return ApiKey(**{**row, "collections": None if limited is None else tuple(json.loads(limited))})


class Keys(Database):
    """The API-key methods of ``Catalog``."""

    def create_key(
        self,
        scope: str,
        name: str = "",
        expires_in_s: float | None = None,
        collections: list[str] | None = None,
    ) -> tuple[ApiKey, str]:
        """A new key of ``scope``, expiring ``expires_in_s`` from now (None: never), limited
        to ``collections`` (None: every one; they need not hold a video yet): its record and
        the key itself, which only this call ever returns."""
        limited = None if collections is None else check_collections(collections)
        if limited == ():
            raise ValueError("a key limited to collections needs at least one")
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {', '.join(SCOPES)}; got {scope!r}")
        if expires_in_s is not None and not expires_in_s > 0:
            raise ValueError(f"a key must expire after it is made; got {expires_in_s} s")
        key_id, secret = uuid.uuid4().hex[:12], secrets.token_urlsafe(32)
        now = time.time()
        expires_at = None if expires_in_s is None else now + expires_in_s
        self._write(
            "INSERT INTO api_keys (id, name, scope, created_at, expires_at, secret_sha256,"
            " collections) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                key_id,
                name,
                scope,
                now,
                expires_at,
                _digest(secret),
                None if limited is None else json.dumps(limited),
            ),
        )
        record = ApiKey(key_id, name, scope, now, expires_at, None, _digest(secret), limited)
        return record, f"{PREFIX}{key_id}_{secret}"

    def api_keys(self) -> list[ApiKey]:
        """Every stored key, revoked and expired ones too, oldest first."""
        return [
            _key_from_row(r)
            for r in self._rows(f"SELECT {_COLUMNS} FROM api_keys ORDER BY created_at, id")
        ]

    def api_key(self, key_id: str) -> ApiKey | None:
        row = self._row(f"SELECT {_COLUMNS} FROM api_keys WHERE id=?", (key_id,))
        return _key_from_row(row) if row else None

    def revoke_key(self, key_id: str) -> ApiKey | None:
        """Revoke a key from now on (a key revoked already keeps its first time); its record,
        None where there is no such key."""
        self._write(
            "UPDATE api_keys SET revoked_at=? WHERE id=? AND revoked_at IS NULL",
            (time.time(), key_id),
        )
        return self.api_key(key_id)
