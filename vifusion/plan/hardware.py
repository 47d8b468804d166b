"""The cluster a plan is for: node types with their counts, cores, GPUs, memory and CPU
share, and each node's access link (rate each way, round trip to the other hosts).

From a ``ray up`` YAML (``available_node_types``, or a local provider's ``head_ip`` and
``worker_ips``) or from a live cluster (``ray.nodes()``). Cores and memory come from the
node type's ``resources`` where given, else from a small table of instance types; what no
YAML says (link rates, a host's CPU share) comes from the node type's Ray ``labels``, which
``ray up`` accepts and a live node then carries::

    labels: {vifusion-uplink: 20mbit, vifusion-rtt-ms: "10", vifusion-cpu-share: "0.5"}

(``vifusion-downlink``, ``vifusion-cpus``, ``vifusion-gpus``, ``vifusion-memory-gb`` too), or
from ``--link TYPE=RATE[/RTT_MS]`` flags. A link with no rate anywhere is taken as 1 Gbit,
0.5 ms (one data-centre network).

The path from node A to node B carries min(A's uplink, B's downlink), and its round trip is
the mean of the two access links' round trips (each is the round trip through its host's
own link to the switch and back).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

LABEL = "vifusion-"  # prefix of the node-type labels this module reads
# Cores that Ray's own processes on a node (raylet, log monitor, dashboard agent) and the
# node's aggregator between hand-overs take while an ingest runs; the pipeline's stages
# share the rest. A few percent of a whole core, but a quarter of a host held to 0.15.
RAY_CORES = 0.03
DEFAULT_RATE_BPS = 1e9  # bits/s of a link nothing describes
DEFAULT_RTT_S = 0.0005
# vCPUs, GPUs, GiB of the instance types deploy/cluster.yaml names and a few neighbours;
# any other type gives CPU (and GPU, memory) in its `resources` or labels.
INSTANCE_TYPES: dict[str, tuple[int, int, int]] = {
    "m6i.large": (2, 0, 8),
    "m6i.xlarge": (4, 0, 16),
    "m6i.2xlarge": (8, 0, 32),
    "m6i.4xlarge": (16, 0, 64),
    "c6i.xlarge": (4, 0, 8),
    "c6i.2xlarge": (8, 0, 16),
    "c6i.4xlarge": (16, 0, 32),
    "r6i.xlarge": (4, 0, 32),
    "r6i.2xlarge": (8, 0, 64),
    "r6i.4xlarge": (16, 0, 128),
    "g5.xlarge": (4, 1, 16),
    "g5.2xlarge": (8, 1, 32),
    "g5.4xlarge": (16, 1, 64),
    "g5.12xlarge": (48, 4, 192),
    "g4dn.xlarge": (4, 1, 16),
    "g4dn.2xlarge": (8, 1, 32),
    "g6.xlarge": (4, 1, 16),
}


def rate_bps(rate: str | float) -> float:
    """A rate ("1gbit", "20mbit", "500kbps", or a number of bits/s) in bits per second."""
    if isinstance(rate, (int, float)):
        return float(rate)
    units = {
        "bit": 1,
        "kbit": 1e3,
        "mbit": 1e6,
        "gbit": 1e9,
        "bps": 8,
        "kbps": 8e3,
        "mbps": 8e6,
        "gbps": 8e9,
    }
    m = re.fullmatch(r"([0-9.]+)\s*([a-z]*)", str(rate).strip().lower())
    if not m or (m[2] or "bit") not in units:
        raise ValueError(f"not a rate: {rate!r} (say 1gbit, 20mbit, 500kbps)")
    return float(m[1]) * units[m[2] or "bit"]


@dataclass(frozen=True)
class NodeType:
    """``count`` identical nodes. Rates in bytes/s, times in seconds."""

    name: str
    count: int
    cpus: float
    gpus: int = 0
    memory_bytes: int = 16 << 30
    cpu_share: float = 1.0  # of its cores it may use (a cgroup's cpu.max, a noisy neighbour)
    uplink: float = DEFAULT_RATE_BPS / 8
    downlink: float = DEFAULT_RATE_BPS / 8
    rtt_s: float = DEFAULT_RTT_S
    resources: dict[str, float] = field(default_factory=dict)  # custom ones (extract, shard)

    @property
    def cores(self) -> float:
        return self.cpus * self.cpu_share

    @property
    def work_cores(self) -> float:
        """Cores the pipeline's stages share: ``cores`` less ``RAY_CORES``."""
        return max(self.cores - RAY_CORES, 0.01)


@dataclass(frozen=True)
class Node:
    """One node: ``type.name``-``index``; ``ip`` and ``node_id`` only on a live cluster."""

    type: NodeType
    index: int
    ip: str | None = None
    node_id: str | None = None

    @property
    def name(self) -> str:
        return f"{self.type.name}-{self.index}"


@dataclass(frozen=True)
class Cluster:
    types: tuple[NodeType, ...]
    head: str  # the head's node type

    def nodes(self) -> list[Node]:
        """Every node, head type first, in a stable order."""
        ordered = sorted(self.types, key=lambda t: (t.name != self.head, t.name))
        return [Node(t, i) for t in ordered for i in range(t.count)]

    def type(self, name: str) -> NodeType:
        return next(t for t in self.types if t.name == name)

    def to_dict(self) -> dict[str, Any]:
        """As JSON holds it (a plan records the cluster it was made for); ``from_dict`` reads it."""
        return {"head": self.head, "types": [asdict(t) for t in self.types]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Cluster:
        return cls(tuple(NodeType(**t) for t in d["types"]), d["head"])

    def with_path_rate(self, src: str, dst: str, rate: float) -> Cluster:
        """This cluster with the path from a node of type ``src`` to one of ``dst`` carrying
        ``rate`` bytes/s: the access link that bounds the path (``src``'s uplink, or ``dst``'s
        downlink where that is lower) set to it, and the other raised to it where below (the
        path carries the lesser of the two, so neither is less than what it carried)."""
        up, down = self.type(src).uplink, self.type(dst).downlink
        new_up, new_down = (rate, max(down, rate)) if up <= down else (max(up, rate), rate)
        types = [replace(t, uplink=new_up) if t.name == src else t for t in self.types]
        types = [replace(t, downlink=new_down) if t.name == dst else t for t in types]
        return replace(self, types=tuple(types))

    def with_link(self, type_name: str, rate: str, rtt_ms: float | None = None) -> Cluster:
        """This cluster with one node type's link set (both ways)."""
        if all(t.name != type_name for t in self.types):
            raise ValueError(
                f"no node type {type_name!r}; there are {', '.join(t.name for t in self.types)}"
            )
        bps = rate_bps(rate) / 8
        return replace(
            self,
            types=tuple(
                replace(
                    t, uplink=bps, downlink=bps, rtt_s=t.rtt_s if rtt_ms is None else rtt_ms / 1e3
                )
                if t.name == type_name
                else t
                for t in self.types
            ),
        )


def path(src: NodeType, dst: NodeType) -> tuple[float, float]:
    """(bytes/s, round trip s) from a node of ``src`` to another of ``dst``."""
    return min(src.uplink, dst.downlink), (src.rtt_s + dst.rtt_s) / 2


def _node_type(name: str, spec: dict[str, Any], count: int) -> NodeType:
    res = dict(spec.get("resources") or {})
    labels = {
        k[len(LABEL) :]: v for k, v in (spec.get("labels") or {}).items() if k.startswith(LABEL)
    }
    known = INSTANCE_TYPES.get(
        str((spec.get("node_config") or {}).get("InstanceType")), (None, 0, 16)
    )
    cpus = labels.get("cpus", res.pop("CPU", known[0]))
    if cpus is None:
        raise ValueError(
            f"node type {name}: how many CPUs? give resources: {{CPU: n}} or the label "
            f"{LABEL}cpus (instance type {(spec.get('node_config') or {}).get('InstanceType')} is "
            "not in vifusion.plan.hardware.INSTANCE_TYPES)"
        )
    gpus = labels.get("gpus", res.pop("GPU", known[1]))
    memory = res.pop("memory", None) or float(labels.get("memory-gb", known[2])) * (1 << 30)
    up = rate_bps(labels.get("uplink", DEFAULT_RATE_BPS)) / 8
    return NodeType(
        name=name,
        count=count,
        cpus=float(cpus),
        gpus=int(gpus),
        memory_bytes=int(memory),
        cpu_share=float(labels.get("cpu-share", 1.0)),
        uplink=up,
        downlink=rate_bps(labels["downlink"]) / 8 if "downlink" in labels else up,
        rtt_s=float(labels.get("rtt-ms", DEFAULT_RTT_S * 1e3)) / 1e3,
        resources={k: float(v) for k, v in res.items() if k != "object_store_memory"},
    )


def from_yaml(path_: Path | str, *, at_max: bool = False) -> Cluster:
    """The cluster a ``ray up`` YAML starts: the head and ``min_workers`` of each worker type
    (``max_workers`` with ``at_max``); a local provider's hosts as one type."""
    doc = yaml.safe_load(Path(path_).read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{path_}: not a ray up cluster config")
    types = doc.get("available_node_types")
    if types:
        head = doc.get("head_node_type")
        if head not in types:
            raise ValueError(f"{path_}: head_node_type {head!r} is not among available_node_types")
        out = []
        for name, spec in types.items():
            n = (
                1
                if name == head
                else int(spec.get("max_workers" if at_max else "min_workers", 0) or 0)
            )
            if n:
                out.append(_node_type(name, spec, n))
        return Cluster(tuple(out), head)
    provider = doc.get("provider") or {}
    if provider.get("type") == "local":
        # One type for every host (the local provider has no node types): say their cores.
        spec = {"resources": {}, "labels": doc.get("vifusion_labels") or {}}
        workers = len(provider.get("worker_ips") or [])
        return Cluster(
            (
                _node_type("head", spec, 1),
                *((_node_type("worker", spec, workers),) if workers else ()),
            ),
            "head",
        )
    raise ValueError(f"{path_}: no available_node_types and not a local provider")


def from_ray() -> tuple[Cluster, list[Node]]:
    """The live cluster Ray is connected to: nodes grouped into types by their resources and
    labels (the head alone as ``head``); also every node with its IP and id."""
    import ray

    groups: dict[tuple, list[dict]] = {}
    head_id = _head_node_id()
    for n in sorted((n for n in ray.nodes() if n["Alive"]), key=lambda n: n["NodeID"]):
        res = n["Resources"]
        key = (
            ("head",)
            if n["NodeID"] == head_id
            else (
                res.get("CPU", 0),
                res.get("GPU", 0),
                round(res.get("memory", 0) / (1 << 30)),
                tuple(sorted((k, v) for k, v in res.items() if k in ("extract", "shard"))),
                tuple(sorted((n.get("Labels") or {}).items())),
            )
        )
        groups.setdefault(key, []).append(n)
    types, nodes = [], []
    for i, (key, members) in enumerate(sorted(groups.items(), key=lambda kv: kv[0] != ("head",))):
        name = "head" if key == ("head",) else f"type{i}"
        first = members[0]
        res = {
            k: v
            for k, v in first["Resources"].items()
            if k in ("CPU", "GPU", "memory", "extract", "shard")
        }
        t = _node_type(name, {"resources": res, "labels": first.get("Labels") or {}}, len(members))
        types.append(t)
        nodes += [Node(t, j, m["NodeManagerAddress"], m["NodeID"]) for j, m in enumerate(members)]
    return Cluster(tuple(types), "head"), nodes


def _head_node_id() -> str | None:
    import ray

    for n in ray.nodes():
        if n["Alive"] and n["Resources"].get("node:__internal_head__"):
            return n["NodeID"]
    return None
