"""Registering a webhook, by the REST API or the command line, under the URL rules of
ingest: http(s) only, no credentials in it, and a host that resolves to public addresses
only, unless ``allow_private_urls`` (``ingest.sources.check_url``; checked again at each
delivery, so a DNS answer that changes later cannot point a hook inside)."""

from __future__ import annotations

from collections.abc import Sequence

from vifusion.catalog import HOOK_EVENTS, Catalog, Hook, check_collection
from vifusion.config import Config
from vifusion.ingest._checks import check_text
from vifusion.ingest.sources import SourceError, check_url

MAX_URL_CHARS = 2048


def register(
    catalog: Catalog,
    cfg: Config,
    url: str,
    events: Sequence[str] | None = None,
    collection: str | None = None,
) -> Hook:
    """A new hook for ``url`` (its secret in it, shown this once), for ``events`` (None: all
    of ``HOOK_EVENTS``) about videos in ``collection`` (None: every one). SourceError for a
    URL that ingest would refuse; ValueError for an unknown event or a collection's name
    out of its rules."""
    if collection is not None:
        check_collection(collection)
    check_text("url", url, one_line=True)
    if len(url) > MAX_URL_CHARS:
        raise SourceError("invalid_uri", f"url is over {MAX_URL_CHARS} characters")
    check_url(url, cfg.allow_private_urls)
    return catalog.create_hook(url, HOOK_EVENTS if events is None else events, collection)
