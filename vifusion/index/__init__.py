"""The vector index: sharded exact FAISS search over the visual and semantic spaces.

``Shard`` holds one shard's vectors and frame times and snapshots them atomically;
``ShardSet`` runs the shards as Ray actors, routes videos to them (``shard_for``) and
fans searches out, ``merge_topk`` merges the per-shard results, and ``group_segments``
turns frame hits into moments.
"""

from vifusion.index.merge import merge_topk
from vifusion.index.router import ShardSet, shard_for
from vifusion.index.segments import group_segments
from vifusion.index.shard import Shard

__all__ = ["Shard", "ShardSet", "group_segments", "merge_topk", "shard_for"]
