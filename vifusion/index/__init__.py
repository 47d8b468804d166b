"""The vector index: sharded FAISS search over the visual and semantic spaces (frames) and
the speech and screen spaces (what is said and written).

``Shard`` holds one shard's vectors and row times, durable through a write-ahead log and
snapshots, with its index type chosen by size (``space.py``); ``ShardSet`` runs each shard
as Ray actor replicas, routes videos to them (``shard_for``), fuses concurrent searches and
fans them out, ``merge_topk`` merges the per-shard results, and ``group_segments`` turns
frame hits into moments.
"""

from vifusion.index.layout import shard_for
from vifusion.index.merge import merge_topk
from vifusion.index.segments import group_segments
from vifusion.index.shard import Shard

__all__ = ["Shard", "ShardSet", "group_segments", "merge_topk", "shard_for"]


def __getattr__(name: str):
    """``ShardSet`` is imported on first use: it needs Ray, which a search in the command
    line's own process (``local.py``) does without."""
    if name == "ShardSet":
        from vifusion.index.router import ShardSet

        return ShardSet
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
