"""What ingest refuses before anything is stored: a title too long, metadata the catalog
could store but not give back or filter on. Each refusal is a ``SourceError`` (a 4xx)."""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from vifusion.config import Config
from vifusion.sources import MAX_TITLE_CHARS, SourceError, title_from_name

_SURROGATE = re.compile("[\ud800-\udfff]")


class Shape(NamedTuple):
    depth: int  # how deep objects and arrays nest ({"a": 1} is 1)
    keys: int  # keys in every object, all told
    text_ok: bool  # no key or string holds a lone surrogate


def shape(value: Any) -> Shape:
    """The shape of parsed JSON, walked without recursion (it may nest a thousand deep)."""
    depth = keys = 0
    text_ok = True
    stack = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, str):
            text_ok = text_ok and not _SURROGATE.search(v)
        elif isinstance(v, dict | list):
            depth = max(depth, d + 1)
            if isinstance(v, dict):
                keys += len(v)
                stack.extend((k, d) for k in v)
                v = v.values()
            stack.extend((x, d + 1) for x in v)
    return Shape(depth, keys, text_ok)


def title_for(given: str | None, name: str | None) -> str:
    """The client's title as given, else one from the file's name. A title longer than
    ``MAX_TITLE_CHARS`` is refused (SourceError, 422); a blank one counts as none."""
    if given is None or not given.strip():
        return title_from_name(name, "video")
    if len(given) > MAX_TITLE_CHARS:
        raise SourceError(
            "invalid_title",
            f"title is {len(given)} characters; the limit is {MAX_TITLE_CHARS}",
            422,
        )
    return given


def check_metadata(metadata: dict[str, Any] | None, cfg: Config) -> None:
    """Refuse (SourceError) metadata that the catalog could store but not give back or
    filter on: nested deeper than ``max_metadata_depth`` (the JSON encoder of a listing
    stops at about 250 levels), more than ``max_metadata_keys`` keys, text with a lone
    surrogate (UTF-8 cannot hold it), NaN or Infinity (SQLite's JSON functions refuse them).
    The shape is walked first, without recursion: json.dumps recurses."""
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        raise SourceError("invalid_metadata", "metadata must be a JSON object")
    found = shape(metadata)
    if found.depth > cfg.max_metadata_depth:
        raise SourceError(
            "metadata_too_deep",
            f"metadata nests {found.depth} levels deep; the limit is {cfg.max_metadata_depth}",
            422,
        )
    if found.keys > cfg.max_metadata_keys:
        raise SourceError(
            "metadata_too_many_keys",
            f"metadata has {found.keys} keys; the limit is {cfg.max_metadata_keys}",
            422,
        )
    if not found.text_ok:
        raise SourceError(
            "invalid_metadata", "metadata holds text with a lone surrogate (not valid Unicode)", 422
        )
    try:
        size = len(json.dumps(metadata, allow_nan=False))
    except ValueError:
        raise SourceError(
            "invalid_metadata", "metadata holds NaN or Infinity (not JSON numbers)", 422
        ) from None
    if size > cfg.max_metadata_bytes:
        raise SourceError(
            "metadata_too_large",
            f"metadata is {size} bytes as JSON; the limit is {cfg.max_metadata_bytes}",
            413,
        )
