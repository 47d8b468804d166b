"""Every shard of a data dir, read in this process: what ``vifusion search`` searches when no
service serves the data dir, without Ray.

Each shard loads as a reader (``Shard(writer=False)``: snapshot, then log, nothing written).
A writer appending meanwhile is seen as of a moment during the load (a record it has not
finished reads as the log's end). Results are those of ``ShardSet.search``; ``missing`` is
always empty, since every shard here answers or the load fails.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from vifusion.config import Config
from vifusion.index.layout import built_shards, refuse_other_count, shard_dir, shard_for
from vifusion.index.merge import merge_topk
from vifusion.index.shard import DIMS, Shard, check_queries
from vifusion.types import Found


class LocalShards:
    """Read-only shards with ``ShardSet``'s search interface (``search``, ``frames``)."""

    def __init__(self, cfg: Config) -> None:
        built = built_shards(cfg.data_dir)
        if built is not None:
            refuse_other_count(cfg.data_dir, built, cfg.num_shards)
        self.num_shards = cfg.num_shards
        self._shards: list[Shard | None] = []
        for n in range(cfg.num_shards if built is not None else 0):
            directory = shard_dir(cfg.data_dir, n)
            self._shards.append(
                Shard(n, directory, cfg, writer=False) if directory.is_dir() else None
            )

    def search(
        self, space: str, queries: np.ndarray, k: int, videos: Iterable[int] | None = None
    ) -> Found:
        """Top-k hits per query across all shards, best first (see ``ShardSet.search``)."""
        queries = check_queries(space, queries, k)
        if videos is None:
            asked = [(shard, None) for shard in self._shards if shard is not None]
        else:
            per: dict[int, list[int]] = {}
            for v in videos:
                per.setdefault(shard_for(int(v), self.num_shards), []).append(int(v))
            asked = [
                (self._shards[n], vs)
                for n, vs in per.items()
                if n < len(self._shards) and self._shards[n]
            ]
        if not asked:
            return Found([[] for _ in range(len(queries))])
        return Found(merge_topk([shard.search(space, queries, k, vs) for shard, vs in asked], k))

    def frames(
        self, space: str, video_id: int, start_s: float, end_s: float, limit: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """A video's stored vectors in a time range: see ``Shard.frames``."""
        n = shard_for(video_id, self.num_shards)
        shard = self._shards[n] if n < len(self._shards) else None
        if shard is None:  # nothing indexed on it yet
            if space not in DIMS:
                raise ValueError(f"unknown space {space!r}; expected one of {tuple(DIMS)}")
            return np.zeros((0, 2), np.float32), np.zeros((0, DIMS[space]), np.float32)
        return shard.frames(space, video_id, start_s, end_s, limit)

    def close(self) -> None:
        """Nothing to stop (no actors, no threads); here so it stands in for a ShardSet."""
        self._shards = []
