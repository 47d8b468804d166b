"""Collections: every video belongs to exactly one, named when it is added (``DEFAULT``
when not), so that one data dir can hold several teams' libraries apart. A search looks in
some of them (their videos' ids go down to the shards' own filter, so ``top_k`` stays full);
a key may be limited to some (``_keys.py``). A collection exists while it holds a video.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from vifusion.catalog._database import Database

DEFAULT = "default"  # every video added without one, and every video from before collections
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")  # a slug: safe in a URL path, a CLI flag, a log


def check_collection(name: object) -> str:
    """``name`` if it is a collection's name (``NAME``), else ValueError saying the rule."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(
            f"a collection's name is 1-64 of a-z, 0-9, '_' and '-', starting with a letter or "
            f"digit; got {name!r}"
        )
    return name


def check_collections(names: Iterable[object]) -> tuple[str, ...]:
    """Each of ``names`` checked (``check_collection``), in order, once each."""
    return tuple(dict.fromkeys(check_collection(n) for n in names))


@dataclass(frozen=True)
class Collection:
    """A collection as listed: its videos (any status) and their indexed frames."""

    name: str
    videos: int
    frames: int


class Collections(Database):
    """The collection methods of ``Catalog``."""

    def collections(self, names: Iterable[str] | None = None) -> list[Collection]:
        """Every collection that holds a video (only ``names`` when given), by name."""
        sql, args = (
            "SELECT collection, count(*) AS n, coalesce(sum(frames_indexed), 0) AS frames"
            " FROM videos",
            [],
        )
        if names is not None:
            names = list(names)
            if not names:
                return []
            where, args = self._any_of("collection", names)
            sql += f" WHERE {where}"
        rows = self._rows(f"{sql} GROUP BY collection ORDER BY collection", args)
        return [Collection(r["collection"], int(r["n"]), int(r["frames"])) for r in rows]

    def collection_video_ids(self, name: str) -> list[int]:
        """The ids of every video in collection ``name`` (any status), in id order."""
        rows = self._rows("SELECT id FROM videos WHERE collection=? ORDER BY id", (name,))
        return [r["id"] for r in rows]
