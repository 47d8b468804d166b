"""Where actors run on a cluster.

- **Shards**: replica ``r`` of shard ``n`` on node ``(n + r) mod N`` of the shard nodes (those
  with the ``shard`` resource that deploy/cluster.yaml gives memory-heavy workers; every alive
  node where none has it), so primaries spread over nodes and a shard's replicas sit on
  different nodes whenever there are enough. The affinity is hard: Ray 2.60's soft affinity
  put replicas on other nodes even while the chosen one was up (measured on the test bed).
  So a replica restarts on its own node; one whose node is gone stays down until the service
  starts again and places it anew.
- **Extractors**: a GPU each where the cluster has as many as extractors, otherwise an equal
  share of the GPUs there are (so every extractor lands on a GPU node). Without GPUs, an
  equal share of the ``extract`` resource where nodes carry it (CPU nodes set aside for
  decoding and embedding), otherwise any node with a free CPU.
- **Aggregators**: one per node, pinned there (``vifusion.fusion.start_aggregators``).
"""

from __future__ import annotations

import math
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

SHARD_RESOURCE = "shard"  # deploy/cluster.yaml: 1 per memory-heavy worker
EXTRACT_RESOURCE = "extract"  # deploy/cluster.yaml: 1 per extractor worker


def spread(num_shards: int, replicas: int, nodes: list[str]) -> list[list[str]]:
    """The node of each replica of each shard: ``[shard][replica]``."""
    if not nodes:
        raise ValueError("no node to place shards on")
    return [[nodes[(n + r) % len(nodes)] for r in range(replicas)] for n in range(num_shards)]


def shard_nodes() -> list[str]:
    """Alive nodes that carry the shard resource, or all alive nodes; in a stable order."""
    alive = [n for n in ray.nodes() if n["Alive"]]
    tagged = [n for n in alive if n["Resources"].get(SHARD_RESOURCE)]
    return sorted(n["NodeID"] for n in (tagged or alive))


def shard_strategies(num_shards: int, replicas: int) -> list[list[NodeAffinitySchedulingStrategy]]:
    """A scheduling strategy for every replica of every shard (``[shard][replica]``)."""
    return [[NodeAffinitySchedulingStrategy(node, soft=False) for node in group]
            for group in spread(num_shards, replicas, shard_nodes())]


def extractor_options(num_extractors: int) -> dict[str, Any]:
    """Ray options for each of ``num_extractors`` extractor actors."""
    have = ray.cluster_resources()
    if gpus := int(have.get("GPU", 0)):
        return {"num_cpus": 1, "num_gpus": 1 / math.ceil(num_extractors / gpus)}
    if units := int(have.get(EXTRACT_RESOURCE, 0)):
        return {"num_cpus": 1, "resources": {EXTRACT_RESOURCE: 1 / math.ceil(num_extractors / units)}}
    return {"num_cpus": 1}
