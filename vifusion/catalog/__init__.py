"""The catalog: what videos exist and where each job stands, and what is said and written in
them (speech segments, on-screen text spans) with a keyword index for the exact words, names
and numbers an embedding blurs.

One interface, ``Catalog`` (``_catalog.py``: videos, jobs and their leases; ``_texts.py``:
texts and keyword search), on two databases: SQLite under the data dir (``_sqlite.py``) or
PostgreSQL (``_postgres.py``), giving the same answers. Open it with ``open_catalog``. The
records it answers with are in ``_records.py``; its schema and migrations in ``_schema.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vifusion import datadir
from vifusion.catalog._catalog import Catalog
from vifusion.catalog._collections import DEFAULT as DEFAULT_COLLECTION
from vifusion.catalog._collections import Collection, check_collection, check_collections
from vifusion.catalog._keys import SCOPES, ApiKey, parse_key, scope_allows
from vifusion.catalog._outbox import HOOK_EVENTS, Delivery, Hook
from vifusion.catalog._postgres import PostgresCatalog
from vifusion.catalog._records import (
    JOB_STAGES,
    JOB_STATES,
    CatalogUnreachable,
    Job,
    LeaseLost,
    NoCatalog,
    TextRow,
    Video,
)
from vifusion.catalog._schema import CatalogTooNew
from vifusion.catalog._sqlite import SqliteCatalog
from vifusion.catalog._words import FUZZY_WEIGHT, METADATA_KEY, TEXT_KINDS, edits, fold, max_edits

if TYPE_CHECKING:
    from vifusion.config import Config

__all__ = [
    "SCOPES",
    "ApiKey",
    "FUZZY_WEIGHT",
    "HOOK_EVENTS",
    "JOB_STAGES",
    "JOB_STATES",
    "METADATA_KEY",
    "TEXT_KINDS",
    "Catalog",
    "Collection",
    "DEFAULT_COLLECTION",
    "CatalogTooNew",
    "CatalogUnreachable",
    "Delivery",
    "Hook",
    "Job",
    "LeaseLost",
    "NoCatalog",
    "TextRow",
    "Video",
    "check_collection",
    "check_collections",
    "edits",
    "fold",
    "max_edits",
    "open_catalog",
    "parse_key",
    "scope_allows",
]


def open_catalog(cfg: Config, read_only: bool = False) -> Catalog:
    """The catalog ``cfg`` names: PostgreSQL at ``cfg.catalog_url``, else the SQLite file in
    the data dir. Opened for writing, it is made where there is none and migrated to this
    release's schema. ``read_only``: a reader beside whatever writes (the command line's
    list, status, search): nothing is created or migrated, and NoCatalog where there is none
    (a mistyped data dir is said as such, not made empty). CatalogUnreachable where the
    server cannot be reached."""
    if read_only and not datadir.has_catalog(cfg):
        raise NoCatalog(f"no catalog in {cfg.data_dir} (is this the data dir?)")
    if cfg.catalog_url is None:
        return SqliteCatalog(cfg.data_dir / datadir.CATALOG_DB, read_only=read_only)
    return PostgresCatalog(cfg.catalog_url, pool_size=cfg.catalog_pool_size, read_only=read_only)
