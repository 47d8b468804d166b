"""What the placement search prunes by, before any simulation (``placement_search.py``).

- ``feasible``: some extractor at all, and on every node memory for its extractors' models
  and its shard replicas' vectors.
- ``upper_bound``: frames/s no run the simulator can make of a candidate exceeds: each node
  makes at most what its decode thread, its cores (or GPUs; with several extractors, at the
  crowded cost or on one extractor's share of the threads) and its aggregator's thread allow,
  a node that holds no shard sends all it makes over its uplink (at the smallest bytes a row
  the codec ladder has), a node other than the head receives its videos' files through the
  narrower of the head's uplink and its downlink (and all of them through the head's
  uplink), each shard applies on one thread, and the frames bound for a node arrive through
  its downlink or are made there; a batch lasts at least as long as its slowest first video
  (the first videos go one to each extractor at once), and as long as its extractors take to
  finish its videos whole, each at its own rate (``_whole_videos_s``); searches served
  meanwhile take their average CPU off the nodes that embed them and the shard replicas that
  serve them (``_queries.load``).
- ``busy``: a candidate without the nodes whose extractors never get a video, so that
  candidates alike once so trimmed are simulated once.
"""

from __future__ import annotations

import math
from dataclasses import replace

from vifusion.comm.codec import Ladder
from vifusion.plan import _queries
from vifusion.plan._sim_extractor import embed_threads
from vifusion.plan.hardware import Cluster, NodeType, path
from vifusion.plan.terms import Candidate, StageCosts, Workload

_SMALLEST_ROW = min(c.bytes_per_row for c in Ladder().codecs) + 16
_AGGREGATOR_BYTES = 512 << 20
_SHARD_ROW_BYTES = 2 * (
    6656 + 64
)  # a row in the index (two spaces, fp32) and its ids, times, slack


def feasible(
    cluster: Cluster, costs: dict[str, StageCosts], c: Candidate, workload: Workload
) -> bool:
    nodes = cluster.nodes()
    if not sum(c.extractors):
        return False
    rows = workload.videos * workload.frames_per_video / len(c.shards)
    held = [0] * len(nodes)
    for group in c.shards:
        for n in group:
            held[n] += 1
    for i, n in enumerate(nodes):
        api = c.api_replicas if i == 0 else 0  # on the head; each loads the model
        need = (
            _AGGREGATOR_BYTES
            + (c.extractors[i] + api) * costs[n.type.name].extractor_bytes
            + held[i] * rows * costs[n.type.name].dedup_ratio * _SHARD_ROW_BYTES
        )
        if c.extractors[i] > n.type.cpus or need > n.type.memory_bytes:
            return False
    return True


def busy(c: Candidate, workload: Workload) -> Candidate:
    """``c`` without the nodes whose extractors never get a video: in a batch of fewer
    videos than extractors, the first videos go one to each extractor in node order
    (``Simulation.run``) and the rest wait for one of those, so every node past them stays
    idle. A node with some extractors idle keeps them all (they split its torch threads).
    Candidates alike once so trimmed run alike."""
    if workload.steady or sum(c.extractors) <= workload.videos:
        return c
    left, kept = workload.videos, []
    for k in c.extractors:
        kept.append(k if left > 0 else 0)
        left -= k
    return replace(c, extractors=tuple(kept))


def upper_bound(
    cluster: Cluster, costs: dict[str, StageCosts], c: Candidate, workload: Workload
) -> float:
    """Frames/s no simulated run of ``c`` can exceed (see the module doc)."""
    nodes = cluster.nodes()
    primaries = {g[0] for g in c.shards}
    file_per_frame = workload.video_bytes / workload.frames_per_video  # bytes
    searching = _queries.load(cluster, costs, c, workload)  # cores the searches take
    make: list[float] = []
    ones = []  # (node, its extractors, one extractor's rate), in node order, where it has any
    for i, n in enumerate(nodes):
        k, s, t = c.extractors[i], costs[n.type.name], n.type
        if not k:
            make.append(0.0)
            continue
        cores = max(t.work_cores - searching[i], 1e-6)
        cpu = s.decode_cs + s.text_cs + s.aggregate_cs * s.dedup_ratio
        one = _one_extractor(t, s, k, cores)
        rates = []
        if i and file_per_frame:  # its files come from the head, whole, each before its frames
            arrive = path(nodes[0].type, t)[0] / file_per_frame  # frames/s
            one = 1 / (1 / arrive + 1 / one)
            rates.append(arrive)
        ones.append((i, k, one))
        rates += [k * one, 1 / (s.aggregate_cs or 1e-12)]
        if s.embed_gpu_s and t.gpus:
            rates.append(t.gpus / s.embed_gpu_s)
        else:
            if k > 1 and s.embed_cs_crowded > s.embed_cs:
                # A frame costs embed_cs only while its extractor embeds alone, on its share
                # of the threads (at most ``alone`` frames/s); the rest pay the crowded cost.
                # The node's CPU then holds f (crowded + cpu) - alone (crowded - embed_cs).
                alone = min(embed_threads(t, s, k), cores) / (s.embed_cs or 1e-12)
                saved = alone * (s.embed_cs_crowded - s.embed_cs)
                rates.append((cores + saved) / (s.embed_cs_crowded + cpu))
            cpu += s.embed_cs_least
        rates.append(cores / cpu)
        if i not in primaries:
            rates.append(t.uplink / (s.dedup_ratio * _SMALLEST_ROW))
        make.append(min(rates))
    ratio = max(costs[n.type.name].dedup_ratio for n in nodes)
    primary_nodes = sorted({g[0] for g in c.shards})
    # Every frame is made on its shard's node or comes in through that node's downlink.
    rate = min(
        sum(make),
        sum(make[p] + nodes[p].type.downlink / (ratio * _SMALLEST_ROW) for p in primary_nodes),
    )
    if file_per_frame:  # every file made elsewhere left the head through its uplink
        rate = min(rate, make[0] + nodes[0].type.uplink / file_per_frame)
    apply_s = [costs[nodes[g[0]].type.name].apply_cs * ratio for g in c.shards]
    if workload.steady:  # each frame is applied by one shard, on one thread
        return min(rate, sum(1 / (a or 1e-12) for a in apply_s))
    total = workload.videos * workload.frames_per_video
    seconds = total / rate if rate else math.inf
    # The first videos go one to each extractor, in node order, at once (``Simulation.run``):
    # the batch lasts at least as long as the slowest of those takes over its video.
    first = [one for _, k, one in ones for _ in range(k)]
    seconds = max(seconds, workload.frames_per_video / min(first[: workload.videos]))
    seconds = _whole_videos_s(ones, make, workload, seconds)
    per_shard = [0] * len(c.shards)
    for v in range(1, workload.videos + 1):
        per_shard[v % len(c.shards)] += workload.frames_per_video
    seconds = max([seconds, *(f * a for f, a in zip(per_shard, apply_s, strict=True))])
    return total / seconds if seconds else math.inf


def _whole_videos_s(
    ones: list[tuple[int, int, float]], make: list[float], workload: Workload, least: float
) -> float:
    """The least time, no less than ``least``, in which the batch's videos can all be done,
    counted in whole videos: by time T, node i with ``k`` extractors, each at most ``one``
    frames/s, making at most ``make[i]`` frames/s in all, has finished at most
    min(k floor(T one / F), floor(T make[i] / F)) videos of F frames (an extractor indexes
    one video after another). Found by bisection, from below."""
    frames, videos = workload.frames_per_video, workload.videos

    def finished(t: float) -> int:
        return sum(
            min(k * math.floor(t * one / frames + 1e-9), math.floor(t * make[i] / frames + 1e-9))
            for i, k, one in ones
        )

    lo, hi = least, videos * frames / (max(min(one, make[i]) for i, _, one in ones) or 1e-12)
    if finished(lo) >= videos:
        return lo
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if finished(mid) >= videos else (mid, hi)
    return lo


def _one_extractor(t: NodeType, s: StageCosts, sharing: int, cores: float) -> float:
    """Frames/s of one of ``sharing`` extractors on a node of type ``t`` with ``cores`` left
    to the ingest, as if alone: no more than its decode thread, its embedding (torch on its
    share of the node's cores, or one GPU) and those cores allow."""
    embed = (
        1 / s.embed_gpu_s
        if s.embed_gpu_s and t.gpus
        else min(embed_threads(t, s, sharing), cores) / (s.embed_cs_least or 1e-12)
    )
    cpu = s.decode_cs + s.text_cs + (0 if s.embed_gpu_s and t.gpus else s.embed_cs_least)
    return min(1 / (s.decode_cs or 1e-12), embed, cores / (cpu or 1e-12))
