"""`vifusion collections` and `vifusion collections delete NAME`: the data dir's collections
(vifusion/catalog/_collections.py), read from its catalog; a delete goes through `vifusion
delete` for each of its videos (through the running service if one serves the data dir, else
here), so their vectors and stored media go with them."""

from __future__ import annotations

import json
import sys

from vifusion.catalog import check_collection, open_catalog
from vifusion.cli.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE, cmd_delete
from vifusion.config import Config


def cmd_collections(cfg: Config, as_json: bool) -> int:
    catalog = open_catalog(cfg, read_only=True)
    try:
        found = catalog.collections()
    finally:
        catalog.close()
    if as_json:
        print(json.dumps([{"name": c.name, "videos": c.videos, "frames": c.frames} for c in found]))
        return EXIT_OK
    print(f"{'videos':>7}  {'frames':>9}  name")
    for c in found:
        print(f"{c.videos:>7}  {c.frames:>9}  {c.name}")
    return EXIT_OK


def cmd_collections_delete(cfg: Config, name: str) -> int:
    try:
        check_collection(name)
    except ValueError as e:
        print(f"vifusion collections delete: {e}", file=sys.stderr)
        return EXIT_USAGE
    catalog = open_catalog(cfg, read_only=True)
    try:
        video_ids = catalog.collection_video_ids(name)
    finally:
        catalog.close()
    if not video_ids:
        print(f"vifusion collections delete: no collection {name!r}", file=sys.stderr)
        return EXIT_FAILED
    return cmd_delete(cfg, video_ids)
