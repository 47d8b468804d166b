"""`vifusion hooks add | list | remove`: the data dir's webhooks, in its catalog, with or
without a running service (the ingest pool's deliverer reads them from there each round).

A hook's secret is printed once, when it is added; what is sent and how a receiver checks
it: vifusion/hooks/ and the README's Webhooks part.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from vifusion.catalog import Hook
from vifusion.cli._catalog_admin import existing_catalog, local_time
from vifusion.cli.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from vifusion.config import Config
from vifusion.hooks import events
from vifusion.ingest.sources import SourceError


def hook_row(h: Hook) -> dict:
    """A hook as `vifusion hooks list --json` prints it (never its secret)."""
    return {
        "id": h.id,
        "url": h.url,
        "events": list(h.events),
        "collection": h.collection,
        "created": local_time(h.created_at),
        "pending": h.pending,
        "last": local_time(h.last_at),
        "last_state": h.last_state,
        "last_status": h.last_status,
        "last_error": h.last_error,
        "last_attempts": h.last_attempts,
    }


def cmd_hooks_add(
    cfg: Config, url: str, event_names: Sequence[str] | None, collection: str | None
) -> int:
    catalog = existing_catalog(cfg)
    try:
        hook = events.register(catalog, cfg, url, event_names or None, collection)
    except (SourceError, ValueError) as e:
        print(f"vifusion hooks add: {e}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        catalog.close()
    where = f"collection {collection}" if collection else "every collection"
    print(f"webhook {hook.id}: {', '.join(hook.events)} for {where} -> {hook.url}")
    print("its secret, shown this once (check X-ViFusion-Signature with it):")
    print(hook.secret)
    return EXIT_OK


def cmd_hooks_list(cfg: Config, as_json: bool) -> int:
    catalog = existing_catalog(cfg)
    try:
        rows = [hook_row(h) for h in catalog.hooks()]
    finally:
        catalog.close()
    if as_json:
        print(json.dumps(rows))
        return EXIT_OK
    print(f"{'id':<12}  {'pending':>7}  {'last attempt':<19}  {'last result':<24}  url (events)")
    for r in rows:
        result = "-"
        if r["last"] is not None:
            got = r["last_status"] if r["last_status"] is not None else r["last_error"]
            result = f"{r['last_state']} ({got}, x{r['last_attempts']})"
        scope = r["collection"] or "all"
        print(
            f"{r['id']:<12}  {r['pending']:>7}  {r['last'] or '-':<19}  {result[:24]:<24}  "
            f"{r['url']} ({', '.join(r['events'])}; {scope})"
        )
    return EXIT_OK


def cmd_hooks_remove(cfg: Config, hook_id: str) -> int:
    catalog = existing_catalog(cfg)
    try:
        removed = catalog.delete_hook(hook_id)
    finally:
        catalog.close()
    if not removed:
        print(f"vifusion hooks remove: no webhook {hook_id!r}", file=sys.stderr)
        return EXIT_FAILED
    print(f"webhook {hook_id} removed")
    return EXIT_OK
