"""What ingest refuses before anything is stored: a title too long, text with a NUL,
metadata the catalog could store but not give back or filter on. Each refusal is a
``SourceError`` (a 4xx). Also the title a video is given without one, and the metadata a
client is shown of what an earlier release stored unchecked."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import TYPE_CHECKING, Any, NamedTuple

from vifusion.config import Config
from vifusion.ingest.sources import MAX_TITLE_CHARS, SourceError

if TYPE_CHECKING:
    from vifusion.catalog import Video

_PLAIN_EXTENSION = re.compile(r"(?<=.)\.[A-Za-z0-9]{1,8}$")  # ".mp4", not ". Who" in "Dr. Who"
_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def check_text(field: str, value: str | None, one_line: bool = False) -> None:
    """Refuse (SourceError 422 ``invalid_text``, naming ``field``) a text holding a NUL:
    PostgreSQL's text columns refuse one (the ingest fails) and its jsonb the ``\\u0000``
    of stored metadata (every filtered search fails), while SQLite keeps it. A ``one_line``
    text (a title, a file name, a URI) holds no control character at all: it is shown on one
    line, and a URI or file name with one names nothing real."""
    if value is None:
        return
    if "\x00" in value:
        raise SourceError("invalid_text", f"{field}: contains a NUL character", 422)
    if one_line and (found := _CONTROL.search(value)):
        raise SourceError(
            "invalid_text",
            f"{field}: contains a control character (U+{ord(found[0]):04X})",
            422,
        )


class Shape(NamedTuple):
    depth: int  # how deep objects and arrays nest ({"a": 1} is 1)
    keys: int  # keys in every object, all told
    text_ok: bool  # no key or string holds a lone surrogate
    nul_at: str | None  # where a key or string holds a NUL ("a.b[0]"; "" for the value itself)


def shape(value: Any) -> Shape:
    """The shape of parsed JSON, walked without recursion (it may nest a thousand deep)."""
    depth = keys = 0
    text_ok = True
    nul_at = None
    stack = [(value, 0, "")]
    while stack:
        v, d, at = stack.pop()
        if isinstance(v, str):
            text_ok = text_ok and not _SURROGATE.search(v)
            if nul_at is None and "\x00" in v:
                nul_at = at
        elif isinstance(v, dict | list):
            depth = max(depth, d + 1)
            if isinstance(v, dict):
                keys += len(v)
                for k, x in v.items():
                    name = str(k).replace("\x00", "\\x00")  # shown in a message: no NUL there
                    where = f"{at}.{name}" if at else name
                    stack.append((x, d + 1, where))
                    if isinstance(k, str):  # keys are text too
                        text_ok = text_ok and not _SURROGATE.search(k)
                        if nul_at is None and "\x00" in k:
                            nul_at = f"{where} (its key)"
            else:
                stack.extend((x, d + 1, f"{at}[{i}]") for i, x in enumerate(v))
    return Shape(depth, keys, text_ok, nul_at)


def title_from_name(name: str | None, fallback: str) -> str:
    """A title for a video the client gave no title: its file name (an upload's, a path's,
    a URL's last segment) without folders and without a plain extension, cut to
    ``MAX_TITLE_CHARS``. A title the client gives is kept as given, never passed here."""
    base = (name or "").replace("\\", "/").rsplit("/", 1)[-1].strip()
    return (_PLAIN_EXTENSION.sub("", base) or fallback)[:MAX_TITLE_CHARS]


def title_for(given: str | None, name: str | None) -> str:
    """The client's title as given, else one from the file's name. A title longer than
    ``MAX_TITLE_CHARS``, or a title or name with a control character (``check_text``), is
    refused (SourceError, 422); a blank title counts as none."""
    check_text("file name", name, one_line=True)
    check_text("title", given, one_line=True)
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
    surrogate (UTF-8 cannot hold it), a NUL (PostgreSQL's jsonb cannot: ``check_text``), NaN
    or Infinity (SQLite's JSON functions refuse them).
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
    if found.nul_at is not None:
        check_text(f"metadata.{found.nul_at}", "\x00")
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


def shown(video: Video, cfg: Config) -> Video:
    """``video`` with the metadata a client can be given: keys stored before ingest checked
    metadata (``check_metadata``) whose values nest too deep or hold a lone surrogate are
    left out (the answer's JSON could not hold them), the rest are kept."""
    kept = {
        k: v
        for k, v in video.metadata.items()
        if (s := shape({k: v})).depth <= cfg.max_metadata_depth and s.text_ok
    }
    return video if len(kept) == len(video.metadata) else dataclasses.replace(video, metadata=kept)
