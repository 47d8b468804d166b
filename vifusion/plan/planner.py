"""`vifusion plan`: describe, calibrate, search, print; with ``--apply``, write the plan where
the runtime reads it (``DATA_DIR/plan.json``, ``vifusion.cluster.placement``)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from vifusion.cluster.placement import PLAN_FILE, signature
from vifusion.config import Config
from vifusion.plan._paths import RUNGS
from vifusion.plan._schema import API_FACTORS, VERSION
from vifusion.plan.calibrate import costs_from_dict
from vifusion.plan.hardware import Cluster, Node
from vifusion.plan.placement_search import Evaluated, PlacementReport, search_placements
from vifusion.plan.terms import StageCosts, Workload

_SHIPPED_BATCHES = 4
# What a plan records of the videos it was made for, so that a re-plan plans for them too.
_VIDEOS = (
    "plan_video_mbps",
    "plan_batch_videos",
    "plan_video_s",
    "plan_queries_per_s",
    "plan_index_rows",
    "plan_query_p50_s",
)


def workload(cfg: Config) -> Workload:
    """The workload a plan is ranked on: a batch of ``cfg.plan_batch_videos`` videos of
    ``plan_video_s`` each, or (0) a steady stream of such videos. In a stream where files
    cross links (``cfg.plan_video_mbps``), the videos are cut to ``_SHIPPED_BATCHES`` batches
    each, at the same bytes a frame: the steady window then covers several videos an
    extractor, so their transfers count as often as in long videos, and the simulation stays
    short."""
    frames = max(1, min(cfg.max_frames, round(cfg.plan_video_s * cfg.sample_fps)))
    steady = not cfg.plan_batch_videos
    if steady and cfg.plan_video_mbps:
        frames = min(frames, _SHIPPED_BATCHES * cfg.embed_batch)
    return Workload(
        videos=cfg.plan_batch_videos,
        frames_per_video=frames,
        embed_batch=cfg.embed_batch,
        latency_target_s=cfg.fusion_latency_target_s,
        steady=steady,
        video_bytes=cfg.plan_video_mbps * 1e6 / 8 * frames / cfg.sample_fps,
        queries_per_s=cfg.plan_queries_per_s,
        index_rows=cfg.plan_index_rows,
        query_target_s=cfg.plan_query_p50_s,
    )


def api_choices(cfg: Config) -> tuple[int, ...]:
    """The API replica counts a plan may choose: the configured one, and where replicas may
    share the shards (``shared_actors``), twice and four times as many (``API_FACTORS``)."""
    factors = API_FACTORS if cfg.shared_actors else API_FACTORS[:1]
    return tuple(k * cfg.api_replicas for k in factors)


def make_plan(
    cfg: Config,
    cluster: Cluster,
    costs: dict[str, StageCosts],
    live: list[Node] | None = None,
    parallel: bool | None = None,
) -> tuple[PlacementReport, dict[str, Any]]:
    """Search the cluster's placements; the report and the plan as ``plan.json`` holds it."""
    report = search_placements(
        cluster,
        costs,
        workload(cfg),
        num_shards=cfg.num_shards,
        replicas=cfg.shard_replicas,
        api_replicas=api_choices(cfg),
        parallel=parallel,
    )
    plan = plan_document(cluster, report.best, live, costs)
    plan["videos"] = {k: getattr(cfg, k) for k in _VIDEOS}  # a re-plan plans for the same
    return report, plan


def plan_document(
    cluster: Cluster,
    chosen: Evaluated,
    live: list[Node] | None = None,
    costs: dict[str, StageCosts] | None = None,
) -> dict[str, Any]:
    """The plan as ``plan.json`` holds it: each node's extractors, the shards' nodes, the
    fusion limits, the API replicas, the prediction, and what it was made for: the cluster,
    and the stage costs where given (``made_for`` reads them back, so that the service can
    plan again)."""
    nodes = cluster.nodes()
    ips = {n.name: n.ip for n in live or []}
    c = chosen.candidate
    return {
        "version": VERSION,
        "made": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "nodes": [
            {
                "name": n.name,
                "type": n.type.name,
                "head": n.type.name == cluster.head,
                "ip": ips.get(n.name),
                "signature": signature(
                    {"CPU": n.type.cpus, "GPU": n.type.gpus, **n.type.resources}
                ),
                "extractors": c.extractors[i],
                **({"codec_floor": RUNGS[c.floor(i)].name} if c.floor(i) else {}),
            }
            for i, n in enumerate(nodes)
        ],
        "shards": [[nodes[i].name for i in group] for group in c.shards],
        "fusion_min_bytes": c.fusion_min_bytes,
        "fusion_max_bytes": c.fusion_max_bytes,
        "api_replicas": c.api_replicas,
        "predicted_fps": round(chosen.result.fps, 2),
        "predicted_p50_s": round(chosen.result.p50_s, 4),
        "predicted_query_p50_s": round(chosen.result.query_p50_s, 4),
        "cluster": cluster.to_dict(),
        **({"costs": {t: asdict(s) for t, s in costs.items()}} if costs is not None else {}),
    }


def videos_of(cfg: Config, plan: dict[str, Any]) -> Config:
    """``cfg`` with the videos ``plan`` was made for (a plan before they were recorded gave
    only their bitrate, as ``video_mbps``)."""
    videos = dict(plan.get("videos") or {})
    if "video_mbps" in plan:
        videos.setdefault("plan_video_mbps", plan["video_mbps"])
    return cfg.updated({k: v for k, v in videos.items() if k in _VIDEOS})


def made_for(plan: dict[str, Any]) -> tuple[Cluster, dict[str, StageCosts]] | None:
    """The cluster and stage costs a plan was made for; None where it does not record them
    (a version 1 plan, or one written without its costs)."""
    if "cluster" not in plan or "costs" not in plan:
        return None
    costs = {t: costs_from_dict(c) for t, c in plan["costs"].items()}
    return Cluster.from_dict(plan["cluster"]), costs


def apply(cfg: Config, plan: dict[str, Any]) -> Path:
    """Write the plan where the runtime reads it (atomically: temp file, fsync, rename)."""
    from vifusion._files import fsync_dir

    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    path = cfg.data_dir / PLAN_FILE
    tmp = path.with_name(f".{PLAN_FILE}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(plan, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(cfg.data_dir)
    return path


def describe(cluster: Cluster, e: Evaluated) -> str:
    """One line: extractors per node (nodes alike folded), where the shards are, fusion limits."""
    nodes = cluster.nodes()
    parts, i = [], 0
    while i < len(nodes):
        j = i
        while (
            j + 1 < len(nodes)
            and nodes[j + 1].type is nodes[i].type
            and e.candidate.extractors[j + 1] == e.candidate.extractors[i]
        ):
            j += 1
        names = nodes[i].name if i == j else f"{nodes[i].name}..{nodes[j].index}"
        parts.append(f"{names}: {e.candidate.extractors[i]}")
        i = j + 1
    shards = ", ".join("+".join(nodes[n].name for n in g) for g in e.candidate.shards)
    floors = ", ".join(  # set per node type (``floor_variants``): said per type
        sorted(
            {
                f"{RUNGS[e.candidate.floor(i)].name} from {n.type.name}"
                for i, n in enumerate(nodes)
                if e.candidate.floor(i)
            }
        )
    )
    searches = (
        f", searches' p50 {e.result.query_p50_s * 1e3:.0f} ms" if e.result.query_p50_s else ""
    )
    floor = f"codec floor {floors} | " if floors else ""
    api = f"{e.candidate.api_replicas} API replicas | " if e.candidate.api_replicas > 1 else ""
    return (
        f"extractors {'; '.join(parts)} | shards on {shards} | fusion "
        f"{e.candidate.fusion_min_bytes >> 10} KiB-{e.candidate.fusion_max_bytes >> 20} MiB | "
        f"{floor}{api}{e.result.fps:.1f} frames/s, p50 {e.result.p50_s * 1e3:.0f} ms{searches}"
    )


def videos_line(cfg: Config, report: PlacementReport) -> str:
    """What the plan was ranked on, in words; for a batch, how long the chosen plan takes."""
    videos = f"videos of {cfg.plan_video_s:g} s at {cfg.plan_video_mbps:g} Mbit/s"
    searches = ""
    if cfg.plan_queries_per_s:
        searches = (
            f", serving {cfg.plan_queries_per_s:g} searches/s over {cfg.plan_index_rows:,} rows"
        )
        if cfg.plan_query_p50_s and report.best.result.query_p50_s > cfg.plan_query_p50_s:
            searches += f" (no placement keeps their p50 within {cfg.plan_query_p50_s:g} s)"
    if not cfg.plan_batch_videos:
        return f"a steady stream of {videos}{searches}"
    return (
        f"a batch of {cfg.plan_batch_videos} {videos}{searches}: "
        f"{report.best.result.seconds:.0f} s predicted to index it"
    )


def report_lines(cluster: Cluster, report: PlacementReport) -> list[str]:
    lines = [f"chosen:    {describe(cluster, report.best)}"]
    if report.runner_up is not None:
        lines.append(f"runner-up: {describe(cluster, report.runner_up)}")
    lines.append(f"even:      {describe(cluster, report.even)}")
    gain = (
        report.best.result.fps / report.even.result.fps if report.even.result.fps else float("inf")
    )
    lines.append(
        f"predicted {gain:.2f}x the even spread; {report.candidates} candidates: {report.evaluated} "
        f"simulated, {report.pruned_infeasible} infeasible, {report.pruned_dominated} dominated, "
        f"{report.pruned_equivalent} alike a simulated one; "
        f"searched in {report.seconds:.2f} s"
    )
    return lines


def report_json(cluster: Cluster, report: PlacementReport, plan: dict[str, Any]) -> dict[str, Any]:
    def one(e: Evaluated | None) -> dict[str, Any] | None:
        return None if e is None else {**plan_document(cluster, e), "made": None}

    return {
        "plan": plan,
        "runner_up": one(report.runner_up),
        "even": one(report.even),
        "candidates": report.candidates,
        "candidates_evaluated": report.evaluated,
        "candidates_pruned": report.pruned,
        "pruned_infeasible": report.pruned_infeasible,
        "pruned_dominated": report.pruned_dominated,
        "pruned_equivalent": report.pruned_equivalent,
        "search_s": round(report.seconds, 3),
    }
