"""`vifusion keys create | list | revoke`: the data dir's API keys, in its catalog, with or
without a running service (every replica sees a change within a second: serve/_auth.py).

A key is printed once, when made; the catalog keeps only its digest (catalog/_keys.py).
"""

from __future__ import annotations

import json
import sys

from vifusion.catalog import ApiKey
from vifusion.cli._catalog_admin import existing_catalog, local_time
from vifusion.cli.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from vifusion.config import Config

_DAY_S = 86400.0


def key_row(k: ApiKey) -> dict:
    """A key as `vifusion keys list --json` prints it (never the key)."""
    return {
        "id": k.id,
        "name": k.name,
        "scope": k.scope,
        "created": local_time(k.created_at),
        "expires": local_time(k.expires_at),
        "revoked": local_time(k.revoked_at),
        "collections": None if k.collections is None else list(k.collections),
    }


def cmd_keys_create(
    cfg: Config,
    scope: str,
    name: str,
    expires_in_days: float | None,
    collections: list[str] | None = None,
) -> int:
    if expires_in_days is not None and not expires_in_days > 0:
        print("vifusion keys create: --expires-in takes a number of days over 0", file=sys.stderr)
        return EXIT_USAGE
    catalog = existing_catalog(cfg)
    try:
        expires_in_s = None if expires_in_days is None else expires_in_days * _DAY_S
        record, key = catalog.create_key(scope, name, expires_in_s, collections)
    except ValueError as e:  # a collection's name
        print(f"vifusion keys create: --collection: {e}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        catalog.close()
    expires = local_time(record.expires_at) or "never"
    reach = "every collection" if record.collections is None else ", ".join(record.collections)
    print(
        f"key id {record.id} (scope {scope}, expires {expires}, reaches {reach}); "
        "the key, shown this once:"
    )
    print(key)
    return EXIT_OK


def cmd_keys_list(cfg: Config, as_json: bool) -> int:
    catalog = existing_catalog(cfg)
    try:
        rows = [key_row(k) for k in catalog.api_keys()]
    finally:
        catalog.close()
    if as_json:
        print(json.dumps(rows))
        return EXIT_OK
    print(f"{'id':<12}  {'scope':<6}  {'created':<19}  {'expires':<19}  {'revoked':<19}  name")
    for r in rows:
        print(
            f"{r['id']:<12}  {r['scope']:<6}  {r['created']:<19}  {r['expires'] or '-':<19}  "
            f"{r['revoked'] or '-':<19}  {r['name']}"
        )
    return EXIT_OK


def cmd_keys_revoke(cfg: Config, key_id: str) -> int:
    catalog = existing_catalog(cfg)
    try:
        record = catalog.revoke_key(key_id)
    finally:
        catalog.close()
    if record is None:
        print(f"vifusion keys revoke: no key {key_id!r}", file=sys.stderr)
        return EXIT_FAILED
    print(f"key {key_id} revoked {local_time(record.revoked_at)}")
    return EXIT_OK
