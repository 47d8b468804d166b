"""Where actors run on a cluster.

- **Shards**: replica ``r`` of shard ``n`` on node ``(n + r) mod N`` of the shard nodes (those
  with the ``shard`` resource; every alive node where none has it), so primaries spread and a
  shard's replicas sit on different nodes where there are enough. The affinity is soft and
  never spills: a replica stays on its node while the node is up, however busy it is, and one
  whose node is lost is restarted by Ray on another node, a shard node where there are any
  (each replica asks for a sliver of the ``shard`` resource), where it catches up from a live
  replica over Ray (``index/replica.py``).
- **Extractors**: a GPU each where there are as many as extractors, else an equal share of
  the GPUs; without GPUs an equal share of the ``extract`` resource where nodes carry it,
  else any node with a free CPU.
- **Aggregators**: one per node, pinned there (``vifusion.fusion.start_aggregators``).
- **API replicas**: on the head, where uploads and media live (``serve/``); each serves
  at most ``API_ONGOING`` requests at once.

A plan (``vifusion plan --apply``: ``DATA_DIR/plan.json``) pins each extractor and shard
replica to the node it names, by IP or as the i-th node of its type, and sets the number of
API replicas; a plan whose nodes are not all there, or made for another number of shards, is
not used (logged), nor is one the runtime cannot read or that fails its schema
(``vifusion/plan/_schema.py``): cut short, a field missing or out of bounds.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from vifusion.datadir import PLAN as PLAN_FILE
from vifusion.plan._schema import MAX_PLAN_BYTES, check_plan

if TYPE_CHECKING:
    from vifusion.config import Config

SHARD_RESOURCE = "shard"  # deploy/cluster.yaml: 1 per memory-heavy worker
_SHARD_SLIVER = 0.001  # of SHARD_RESOURCE per replica: only where it may run, not how many
EXTRACT_RESOURCE = "extract"  # deploy/cluster.yaml: 1 per extractor worker
API_ONGOING = 32  # requests an API replica serves at once; more wait in Serve's queue
_REFUSED: set[tuple[str, int, int, str]] = set()  # plan.json versions logged as not used
log = logging.getLogger(__name__)


def load_plan(data_dir: Path) -> dict[str, Any] | None:
    """The plan in ``data_dir`` as written (``vifusion plan --apply``), or None where there is
    none; ValueError where the file is not JSON (cut short) or is over ``MAX_PLAN_BYTES``."""
    path = Path(data_dir) / PLAN_FILE
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_PLAN_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(raw) > MAX_PLAN_BYTES:
        raise ValueError(f"over {MAX_PLAN_BYTES} bytes")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"not JSON ({e})") from None


def applied_plan(cfg: Config) -> dict[str, Any] | None:
    """The plan the runtime places by: the data dir's, unless ``use_plan`` is off. A plan.json
    the runtime cannot place by (unreadable, not JSON, or failing ``check_plan``: a field
    missing or out of bounds) is logged, once a process for each version of the file, and
    not used: the service runs unplanned rather than not at all."""
    if not cfg.use_plan:
        return None
    try:
        plan = load_plan(cfg.data_dir)
        return None if plan is None else check_plan(plan, cfg)
    except (OSError, ValueError) as e:
        path = cfg.data_dir / PLAN_FILE
        with contextlib.suppress(OSError):
            stat = path.stat()
            seen = (str(path), stat.st_mtime_ns, stat.st_size, str(e))
            if seen in _REFUSED:
                return None
            _REFUSED.add(seen)
        log.error("%s is not used, the service runs unplanned: %s", path, e)
        return None


def signature(resources: dict[str, float]) -> list[float]:
    """What tells node types apart to Ray: CPUs, GPUs and the custom placement resources."""
    return [float(resources.get(k, 0)) for k in ("CPU", "GPU", EXTRACT_RESOURCE, SHARD_RESOURCE)]


def plan_nodes(plan: dict[str, Any]) -> dict[str, str] | None:
    """Plan node name -> live node id; None (logged) when some plan node is not there."""
    alive = sorted((n for n in ray.nodes() if n["Alive"]), key=lambda n: n["NodeID"])
    by_ip = {n["NodeManagerAddress"]: n["NodeID"] for n in alive}
    head = next((n["NodeID"] for n in alive if n["Resources"].get("node:__internal_head__")), None)
    taken: set[str] = set()
    out: dict[str, str] = {}
    for node in plan["nodes"]:
        if node.get("ip"):
            found = by_ip.get(node["ip"])
        elif node.get("head"):
            found = head
        else:
            found = next(
                (
                    n["NodeID"]
                    for n in alive
                    if n["NodeID"] not in taken
                    and n["NodeID"] != head
                    and signature(n["Resources"]) == node["signature"]
                ),
                None,
            )
        if found is None:
            log.warning("plan node %s is not in the cluster: the plan is not used", node["name"])
            return None
        taken.add(found)
        out[node["name"]] = found
    return out


def planned_codec_floors(plan: dict[str, Any] | None) -> dict[str, str]:
    """Live node id -> the least compressed codec its links may use, where the plan sets
    one (``vifusion plan``'s codec floor for a node behind a narrow uplink)."""
    from vifusion.comm.codec import Ladder  # FAISS: only where a plan is read

    nodes = plan_nodes(plan) if plan is not None else None
    if nodes is None:
        return {}
    known = tuple(c.name for c in Ladder().codecs)  # no tables: the codecs every node has
    floors = {}
    for n in plan["nodes"]:
        floor = n.get("codec_floor")
        if floor in known:
            floors[nodes[n["name"]]] = floor
        elif floor is not None:
            log.warning("plan node %s: codec floor %r is not one of %s", n["name"], floor, known)
    return floors


def planned_api_replicas(plan: dict[str, Any] | None, least: int, shared_actors: bool) -> int:
    """The API replicas to run: the plan's count where it sets more than ``least``
    (``api_replicas``, the configured least), else ``least``. More than one needs
    ``shared_actors`` (no replica may own the shards the others use): without it a plan's
    larger count is logged and not used."""
    planned = int((plan or {}).get("api_replicas") or 0)
    if planned <= least:
        return least
    if not shared_actors:
        log.warning("the plan's %d API replicas need shared_actors: running %d", planned, least)
        return least
    return planned


def planned_shard_strategies(
    plan: dict[str, Any] | None, num_shards: int, replicas: int
) -> list[list[NodeAffinitySchedulingStrategy]] | None:
    """The plan's node for every replica of every shard; None where it does not apply."""
    if plan is None:
        return None
    if len(plan["shards"]) != num_shards or any(len(g) != replicas for g in plan["shards"]):
        log.warning(
            "the plan is for %d shards of %d replicas: not used for the shards",
            len(plan["shards"]),
            len(plan["shards"][0]) if plan["shards"] else 0,
        )
        return None
    nodes = plan_nodes(plan)
    if nodes is None:
        return None
    return [[shard_strategy(nodes[name]) for name in group] for group in plan["shards"]]


def planned_extractors(plan: dict[str, Any] | None) -> list[tuple[dict[str, Any], int]] | None:
    """For each extractor the plan places: its Ray options (one CPU, on its node) and how
    many extractors share that node. None where the plan does not apply."""
    nodes = plan_nodes(plan) if plan is not None else None
    if nodes is None:
        return None
    return [
        (
            {
                "num_cpus": 1,
                "scheduling_strategy": NodeAffinitySchedulingStrategy(nodes[n["name"]], soft=False),
            },
            n["extractors"],
        )
        for n in plan["nodes"]
        for _ in range(n["extractors"])
    ]


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
    return [
        [shard_strategy(node) for node in group]
        for group in spread(num_shards, replicas, shard_nodes())
    ]


def shard_resources() -> dict[str, float]:
    """The resources each shard replica asks for: a sliver of ``shard`` where nodes carry it,
    so that Ray restarts a replica whose node is lost only on another shard node."""
    tagged = any(n["Alive"] and n["Resources"].get(SHARD_RESOURCE) for n in ray.nodes())
    return {SHARD_RESOURCE: _SHARD_SLIVER} if tagged else {}


def shard_strategy(node: str) -> NodeAffinitySchedulingStrategy:
    """A shard replica's place: ``node`` while it is alive (not spilled elsewhere when it is
    busy), any other node Ray finds once it is gone."""
    return NodeAffinitySchedulingStrategy(node, soft=True, _spill_on_unavailable=False)


def extractors_a_node(num_extractors: int) -> int:
    """How many of ``num_extractors`` unplanned extractors share a node: spread evenly over
    the nodes they may run on (GPU nodes, else ``extract`` nodes, else every node), as
    ``extractor_options`` lets Ray place them. Exact on one machine; on a cluster Ray may
    pack them tighter."""
    alive = [n["Resources"] for n in ray.nodes() if n["Alive"]]
    hosts = (
        [r for r in alive if r.get("GPU")] or [r for r in alive if r.get(EXTRACT_RESOURCE)] or alive
    )
    return max(1, math.ceil(num_extractors / max(len(hosts), 1)))


def extractor_options(num_extractors: int) -> dict[str, Any]:
    """Ray options for each of ``num_extractors`` extractor actors."""
    have = ray.cluster_resources()
    if gpus := int(have.get("GPU", 0)):
        return {"num_cpus": 1, "num_gpus": 1 / math.ceil(num_extractors / gpus)}
    if units := int(have.get(EXTRACT_RESOURCE, 0)):
        return {
            "num_cpus": 1,
            "resources": {EXTRACT_RESOURCE: 1 / math.ceil(num_extractors / units)},
        }
    return {"num_cpus": 1}
