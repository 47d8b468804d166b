"""What the CLI's catalog commands (`keys`, `hooks`, `list`, `status`) share: the catalog
opened to write an existing data dir, and times as they print them."""

from __future__ import annotations

import time

from vifusion import datadir
from vifusion.catalog import Catalog, NoCatalog, open_catalog
from vifusion.config import Config


def existing_catalog(cfg: Config) -> Catalog:
    """The catalog, opened to write (one from before keys or webhooks gains their tables),
    but never made where there is no data dir: a mistyped one is said as such."""
    if not datadir.has_catalog(cfg) and not cfg.data_dir.is_dir():
        raise NoCatalog(f"no data dir at {cfg.data_dir}")
    return open_catalog(cfg)


def local_time(t: float | None) -> str | None:
    """A Unix time as `YYYY-MM-DD HH:MM:SS` in local time (None stays None)."""
    return None if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
