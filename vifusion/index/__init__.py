"""The vector index: sharded FAISS search over frames (visual, semantic) and text (speech,
screen). ``Shard`` holds one shard durably; ``ShardSet`` runs shards as Ray actor replicas."""

from vifusion.index.layout import shard_for
from vifusion.index.merge import merge_topk
from vifusion.index.segments import group_segments
from vifusion.index.shard import Shard

__all__ = ["Shard", "ShardSet", "group_segments", "merge_topk", "shard_for"]


def __getattr__(name: str):
    """``ShardSet`` is imported on first use: it needs Ray, which a local search does without."""
    if name == "ShardSet":
        from vifusion.index.router import ShardSet

        return ShardSet
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
