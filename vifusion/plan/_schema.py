"""What a plan.json must hold to be placed by: every field the runtime reads, typed and
bounded, and the names it cross-refers resolving. ``check_plan`` says what is wrong in one
line; ``vifusion.cluster.placement.applied_plan`` then logs it and runs unplanned, so a file cut
short, written by hand or by another version never stops the service or fails its jobs."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

if TYPE_CHECKING:
    from vifusion.config import Config

# 2: the plan records the cluster and stage costs it was made for (version 1 did not: such a
# plan is still placed by, but cannot be made again for a changed link).
VERSION = 2
# The API replica counts a plan may choose, as multiples of the configured least
# (``planner.api_choices``): a plan asking for more was not made for this configuration.
API_FACTORS = (1, 2, 4)
MAX_PLAN_BYTES = 4 << 20  # a plan of 1024 nodes is well under 1 MiB
_MAX_NODES = 1024
_MAX_EXTRACTORS = 256  # on one node: the planner gives at most one a core
_MAX_SHARDS = 4096
_MAX_REPLICAS = 16
# A fused batch is held whole in an aggregator's buffer for each shard; the planner's largest
# is 8 MiB.
_MAX_FUSION_BYTES = 64 << 20
_NAME = Field(min_length=1, max_length=128)


class _Strict(BaseModel):
    # JSON's numbers as they are (no "3" for 3, no true for 1), and no NaN or Infinity, which
    # Python's json module reads but nothing downstream can use.
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="ignore")


class _Node(_Strict):
    name: str = _NAME
    type: str | None = Field(None, max_length=128)
    head: bool = False
    ip: str | None = Field(None, max_length=64)
    signature: list[float] | None = Field(None, min_length=4, max_length=4)
    extractors: int = Field(ge=0, le=_MAX_EXTRACTORS)
    codec_floor: str | None = Field(None, max_length=16)  # an unknown one is logged, not used

    @field_validator("ip")
    @classmethod
    def _an_address(cls, ip: str | None) -> str | None:
        if ip is not None:
            ipaddress.ip_address(ip)  # ValueError: "... does not appear to be an IP address"
        return ip

    @field_validator("signature")
    @classmethod
    def _resources(cls, signature: list[float] | None) -> list[float] | None:
        if signature is not None and not all(0 <= x <= 1e6 for x in signature):
            raise ValueError("each of CPU, GPU, extract, shard must be between 0 and 1e6")
        return signature


class _Plan(_Strict):
    version: int = Field(1, ge=1, le=VERSION)
    made: str | None = Field(None, max_length=64)
    nodes: list[_Node] = Field(min_length=1, max_length=_MAX_NODES)
    shards: list[list[str]] = Field(max_length=_MAX_SHARDS)
    fusion_min_bytes: int = Field(ge=1, le=_MAX_FUSION_BYTES)
    fusion_max_bytes: int = Field(ge=1, le=_MAX_FUSION_BYTES)
    api_replicas: int | None = Field(None, ge=1)
    predicted_fps: float = Field(0.0, ge=0, le=1e9)
    predicted_p50_s: float = Field(0.0, ge=0, le=1e9)
    predicted_query_p50_s: float = Field(0.0, ge=0, le=1e9)
    video_mbps: float | None = Field(None, ge=0, le=1e6)
    videos: dict[str, float | int] | None = Field(None, max_length=16)
    cluster: dict[str, Any] | None = None  # read by planner.made_for, which says what is wrong
    costs: dict[str, Any] | None = None


def check_plan(doc: Any, cfg: Config) -> dict[str, Any]:
    """``doc`` (plan.json as parsed) if the runtime can place by it under ``cfg``, else
    ValueError saying, in one line, what is wrong with it."""
    try:
        plan = _Plan.model_validate(doc)
    except ValidationError as e:
        raise ValueError(_one_line(e)) from None
    names = [n.name for n in plan.nodes]
    if len(set(names)) != len(names):
        raise ValueError("nodes: two nodes have one name")
    for node in plan.nodes:
        if node.ip is None and not node.head and node.signature is None:
            raise ValueError(
                f"node {node.name}: no ip, not the head and no signature to find it by"
            )
    for i, group in enumerate(plan.shards):
        if not 1 <= len(group) <= _MAX_REPLICAS:
            raise ValueError(f"shards.{i}: {len(group)} replicas; 1 to {_MAX_REPLICAS} may be")
        if unknown := set(group) - set(names):
            raise ValueError(f"shards.{i}: no node named {sorted(unknown)[0]!r}")
    if plan.fusion_min_bytes > plan.fusion_max_bytes:
        raise ValueError(
            f"fusion_min_bytes {plan.fusion_min_bytes} is over fusion_max_bytes "
            f"{plan.fusion_max_bytes}"
        )
    most = API_FACTORS[-1] * cfg.api_replicas
    if plan.api_replicas is not None and plan.api_replicas > most:
        raise ValueError(
            f"api_replicas {plan.api_replicas} is over {most}, the most a plan may set "
            f"({API_FACTORS[-1]} x the configured api_replicas {cfg.api_replicas})"
        )
    return doc


def _one_line(e: ValidationError) -> str:
    first = e.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "the plan"
    more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"
