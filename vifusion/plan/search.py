"""The search: candidate placements, pruned, the rest simulated; the fastest wins.

Candidates: how many extractors on each node type (every node of a type alike, from none
to one per core: an extractor asks Ray for one CPU), which node type holds the shards
(primaries and replicas spread over its nodes as ``placement.spread`` does, or over every
node: the even spread), and the fusion size limits. Three prunings come before any
simulation:

- **infeasible**: no extractor at all, or a node's memory short of its extractors' models
  and its shard replicas' vectors;
- **dominated**: an upper bound on the candidate's frames/s below the best simulated so
  far. The bound holds for every run the simulator can make: each node makes at most what
  its decode thread, its cores (or GPUs; with several extractors, at the crowded cost or
  on one extractor's share of the threads) and its aggregator's thread allow, a node that
  holds no shard sends all it makes over its uplink (at the smallest bytes a row the codec
  ladder has), a node other than the head receives its videos' files through the narrower
  of the head's uplink and its downlink (and all of them through the head's uplink), each
  shard applies on one thread, and the frames bound for a node arrive through its downlink
  or are made there; a batch lasts at least as long as its slowest first video (the first
  videos go one to each extractor at once), and as long as its extractors take to finish
  its videos whole, each at its own rate (``_whole_videos_s``); searches served meanwhile
  take their average CPU off the nodes that embed them and the shard replicas that serve
  them (``_queries.load``). Candidates are simulated in order of their
  bound, so most of them never need a simulation, and one whose bound at best ties the best
  found is not simulated either;
- **alike**: in a batch of fewer videos than extractors, a candidate that differs from one
  already taken only on nodes whose extractors never get a video (``busy``).

What is left is simulated, in parallel as Ray tasks when Ray is up (in this process
otherwise). With a search target (``Workload.query_target_s``), a placement whose searches'
p50 passes it ranks after every one that keeps it (the shards' node decides where searches
are served and what they slow down), and only a best that keeps it prunes others. A steady
rate is held to its candidate's bound (a finite window can read above it), so a pruned
candidate could not have won. Ties in frames/s among those simulated go to
the lower p50. The fusion limits, codec floors and API replica counts are searched for the
three best placements only (they move frames/s by percents where placement moves it by
times, and trying each with every placement tripled the search). A codec floor
(``floor_variants``) starts a node's links compressed, fp16 or int8, and keeps them so: the
adaptive policy learns a narrow link from congestion, and loses rows/s while it does. The
bounds hold with floors too (they count a row at the ladder's smallest). A floor is kept only
where it adds over ``_FLOOR_GAIN`` of frames/s: its rows are lossy for good. More API
replicas (``search``'s ``api_replicas``, where searches are planned) let more searches be in
flight at once where each waits on far shards; each holds a model in the head's memory, so
more are kept only where they cut the searches' p50 by over ``_API_GAIN``.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from vifusion.cluster.placement import spread
from vifusion.comm.codec import Ladder
from vifusion.plan import _queries
from vifusion.plan._extractor import embed_threads
from vifusion.plan.model import Cluster, NodeType, path
from vifusion.plan.simulate import Candidate, Result, StageCosts, Workload, simulate

FUSION_LIMITS = ((64 << 10, 8 << 20), (256 << 10, 8 << 20), (64 << 10, 1 << 20))
_SMALLEST_ROW = min(c.bytes_per_row for c in Ladder().codecs) + 16
_AGGREGATOR_BYTES = 512 << 20
_SHARD_ROW_BYTES = 2 * (
    6656 + 64
)  # a row in the index (two spaces, fp32) and its ids, times, slack
_TIE = 1e-6
_FLOOR_LEVELS = (1, 2)  # codec floors tried: fp16 and int8 (the lossy codecs needing no tables)
_FLOOR_GAIN = 0.02
_API_GAIN = 0.1


@dataclass(frozen=True)
class Evaluated:
    candidate: Candidate
    result: Result


@dataclass
class SearchReport:
    best: Evaluated
    runner_up: Evaluated | None
    even: Evaluated
    candidates: int
    evaluated: int
    pruned_infeasible: int
    pruned_dominated: int
    seconds: float
    ranked: list[Evaluated] = field(default_factory=list)
    # a batch's candidates that differ from one simulated only in extractors given no video
    pruned_equivalent: int = 0

    @property
    def pruned(self) -> int:
        return self.pruned_infeasible + self.pruned_dominated + self.pruned_equivalent


def extractor_options(t: NodeType) -> list[int]:
    """Extractors per node of this type: 0 to one per CPU (at most 8 choices, doubling)."""
    most = max(int(t.cpus), 0)
    if most <= 6:
        return list(range(most + 1))
    return sorted({0, 1, 2, *(2**i for i in range(2, int(math.log2(most)) + 1)), most})


def candidates(
    cluster: Cluster,
    num_shards: int,
    replicas: int,
    fusion: Iterable[tuple[int, int]] = FUSION_LIMITS,
    api_replicas: int = 1,
) -> Iterable[Candidate]:
    """Every candidate of the space (see the module doc), the even spread among them, each
    with ``api_replicas``."""
    nodes = cluster.nodes()
    index = {n.name: i for i, n in enumerate(nodes)}
    types = sorted(cluster.types, key=lambda t: t.name)
    homes = [[index[n.name] for n in nodes if n.type.name == t.name] for t in types]
    homes.append(list(range(len(nodes))))  # every node: the even spread
    for counts in itertools.product(*(extractor_options(t) for t in types)):
        per_type = dict(zip((t.name for t in types), counts, strict=True))
        extractors = tuple(per_type[n.type.name] for n in nodes)
        for home in homes:
            shards = tuple(tuple(g) for g in spread(num_shards, replicas, home))
            for lo, hi in fusion:
                yield Candidate(extractors, shards, lo, hi, api_replicas=api_replicas)


def even_spread(
    cluster: Cluster, num_shards: int, replicas: int, api_replicas: int = 1
) -> Candidate:
    """What the static placement amounts to: the same number of extractors on every node
    (what the weakest node's cores allow, at least one), shards round-robin over all nodes,
    and the configured API replicas."""
    nodes = cluster.nodes()
    each = max(1, min(int(n.type.cpus) for n in nodes))
    return Candidate(
        tuple(each for _ in nodes),
        tuple(tuple(g) for g in spread(num_shards, replicas, list(range(len(nodes))))),
        api_replicas=api_replicas,
    )


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


def _meets(r: Result, workload: Workload) -> bool:
    """Whether ``r`` serves searches within the workload's target (if it sets one)."""
    return not workload.query_target_s or r.query_p50_s <= workload.query_target_s


def _rank(r: Result, workload: Workload) -> tuple[bool, float, float, float]:
    """Sort key, best first: those that keep the search target, by frames/s (ties to the
    quicker searches, then the lower p50); then the others, by their search p50."""
    if _meets(r, workload):
        return (False, -round(r.fps, 6), r.query_p50_s, r.p50_s)
    return (True, r.query_p50_s, -r.fps, r.p50_s)


def _better(a: Result, b: Result | None, workload: Workload) -> bool:
    if b is None:
        return True
    if _meets(a, workload) != _meets(b, workload):
        return _meets(a, workload)
    if not _meets(a, workload):
        return a.query_p50_s < b.query_p50_s
    if a.fps > b.fps * (1 + _TIE):
        return True
    return a.fps >= b.fps * (1 - _TIE) and (a.query_p50_s, a.p50_s) < (b.query_p50_s, b.p50_s)


def floor_variants(cluster: Cluster, c: Candidate) -> list[Candidate]:
    """``c`` with a codec floor (each of ``_FLOOR_LEVELS``) on the nodes of one type that send
    all their rows to other nodes: those with extractors and no shard primary (a floor applies
    to every link of a node's aggregator, and a link within a node gains nothing from it)."""
    nodes = cluster.nodes()
    primaries = {g[0] for g in c.shards}
    out = []
    for t in sorted(cluster.types, key=lambda t: t.name):
        senders = {
            i
            for i, n in enumerate(nodes)
            if n.type.name == t.name and c.extractors[i] and i not in primaries
        }
        for level in _FLOOR_LEVELS if senders else ():
            floors = tuple(level if i in senders else 0 for i in range(len(nodes)))
            out.append(replace(c, codec_floor=floors))
    return out


def _floors_that_pay(ranked: list[Evaluated]) -> list[Evaluated]:
    """``ranked`` without the codec floors that add no more than ``_FLOOR_GAIN`` of frames/s
    to their placement without one: a floor makes rows lossy for good, and must buy a rate."""
    plain = {e.candidate: e.result.fps for e in ranked if not e.candidate.codec_floor}
    return [
        e
        for e in ranked
        if not e.candidate.codec_floor
        or e.result.fps > plain.get(replace(e.candidate, codec_floor=()), 0.0) * (1 + _FLOOR_GAIN)
    ]


def _replicas_that_pay(ranked: list[Evaluated], workload: Workload) -> list[Evaluated]:
    """``ranked`` without the API replica counts that do not cut the searches' p50 by over
    ``_API_GAIN`` below that of every fewer count tried for the same placement (a replica
    holds a model in the head's memory), unless they keep the search target where the
    fewer did not."""
    by = {e.candidate: e.result for e in ranked}

    def pays(e: Evaluated) -> bool:
        fewer = [
            r
            for c, r in by.items()
            if c.api_replicas < e.candidate.api_replicas
            and replace(c, api_replicas=e.candidate.api_replicas) == e.candidate
        ]
        if not fewer:
            return True
        best = min(fewer, key=lambda r: r.query_p50_s)
        if _meets(e.result, workload) and not _meets(best, workload):
            return True
        return e.result.query_p50_s < best.query_p50_s * (1 - _API_GAIN)

    return [e for e in ranked if pays(e)]


def _evaluate_chunk(
    cluster: Cluster, costs: dict[str, StageCosts], chunk: list[Candidate], workload: Workload
) -> list[Result]:
    return [simulate(cluster, costs, c, workload) for c in chunk]


def search(
    cluster: Cluster,
    costs: dict[str, StageCosts],
    workload: Workload,
    *,
    num_shards: int = 2,
    replicas: int = 1,
    api_replicas: Sequence[int] = (1,),
    space: Iterable[Candidate] | None = None,
    prune: bool = True,
    parallel: bool | None = None,
    batch: int = 16,
) -> SearchReport:
    """The best candidate of ``space`` (default: ``candidates``) for ``workload``, with the
    runner-up and the even spread beside it. ``api_replicas``: the API replica counts to try,
    the first (the configured count) for every placement, the others for the best few where
    searches are planned. ``parallel``: simulate on Ray (None: when Ray is up)."""
    t0 = time.perf_counter()
    if space is None:  # placements first, then the fusion limits and codec floors of the best few
        first = search(
            cluster,
            costs,
            workload,
            num_shards=num_shards,
            replicas=replicas,
            api_replicas=api_replicas,
            prune=prune,
            parallel=parallel,
            batch=batch,
            space=list(
                candidates(cluster, num_shards, replicas, FUSION_LIMITS[:1], api_replicas[0])
            ),
        )
        top = [e.candidate for e in first.ranked[:3]]
        more_api = api_replicas[1:] if workload.queries_per_s else ()
        variants = (
            [
                replace(c, fusion_min_bytes=lo, fusion_max_bytes=hi)
                for c in top
                for lo, hi in FUSION_LIMITS[1:]
            ]
            + [f for c in top for f in floor_variants(cluster, c)]
            + [replace(c, api_replicas=k) for c in top for k in more_api]
        )
        second = search(
            cluster,
            costs,
            workload,
            num_shards=num_shards,
            replicas=replicas,
            api_replicas=api_replicas,
            prune=False,
            parallel=parallel,
            batch=batch,
            space=top + variants,
        )
        ranked = _replicas_that_pay(_floors_that_pay(second.ranked), workload)
        return SearchReport(
            ranked[0],
            ranked[1] if len(ranked) > 1 else None,
            first.even,
            first.candidates + len(variants),
            first.evaluated + len(variants),
            first.pruned_infeasible,
            first.pruned_dominated,
            time.perf_counter() - t0,
            ranked,
            first.pruned_equivalent,
        )
    space = list(space)
    even = even_spread(cluster, num_shards, replicas, api_replicas[0])
    ok = [c for c in space if feasible(cluster, costs, c, workload)]
    infeasible = len(space) - len(ok)
    key = {c: busy(c, workload) if prune else c for c in ok}
    bounds = {c: upper_bound(cluster, costs, key[c], workload) for c in ok}
    # of candidates alike (one key), the one with the fewest extractors is simulated
    order = sorted(ok, key=lambda c: (-bounds[c], sum(c.extractors)))
    simulate_all = _runner(cluster, costs, workload, parallel)
    # what a steady rate is held to: the bounds, and the even spread's (it may be infeasible)
    cap = {even: upper_bound(cluster, costs, even, workload), **bounds}

    def run(chunk: list[Candidate]) -> list[Result]:
        """Simulated, a steady rate held to the candidate's bound: read over a finite window,
        it can count work that was stored in the warm-up (files received, frames decoded)
        and read above a capacity no long run can pass. So can a run with searches, whose
        random arrivals may take less CPU than they do on average. Held so, no result passes
        its bound, and pruning by the bound drops nothing that could win."""
        results = simulate_all(chunk)
        if not workload.steady and not workload.queries_per_s:
            return results
        return [replace(r, fps=min(r.fps, cap[c])) for c, r in zip(chunk, results, strict=True)]

    done: dict[Candidate, Result] = {}
    best: Result | None = None
    dominated = equivalent = 0
    seen: set[Candidate] = set()
    i = 0
    while i < len(order):
        chunk = []
        while i < len(order) and len(chunk) < batch:
            c = order[i]
            i += 1
            if key[c] in seen:
                equivalent += 1
                continue
            seen.add(key[c])
            # only a best that keeps the search target prunes: one that does not may yet lose
            if (
                prune
                and best is not None
                and _meets(best, workload)
                and bounds[c] <= best.fps * (1 + _TIE)
            ):
                dominated += 1
            else:
                chunk.append(c)
        for c, r in zip(chunk, run(chunk), strict=True):
            done[c] = r
            if _better(r, best, workload):
                best = r
    if even not in done:  # for comparison: simulated even where pruned
        done[even] = run([even])[0]
        dominated -= even in bounds
    ranked = sorted(
        (Evaluated(c, r) for c, r in done.items() if c in bounds or c == even),
        key=lambda e: _rank(e.result, workload),
    )
    ranked = [e for e in ranked if e.candidate in bounds]  # the even spread may be infeasible
    if not ranked:
        raise ValueError(
            "no feasible placement: every candidate lacks memory or CPUs for what it places"
        )
    return SearchReport(
        best=ranked[0],
        runner_up=ranked[1] if len(ranked) > 1 else None,
        even=Evaluated(even, done[even]),
        candidates=len(space),
        evaluated=len(done),
        pruned_infeasible=infeasible,
        pruned_dominated=dominated,
        seconds=time.perf_counter() - t0,
        ranked=ranked,
        pruned_equivalent=equivalent,
    )


def _runner(
    cluster: Cluster, costs: dict[str, StageCosts], workload: Workload, parallel: bool | None
) -> Callable[[list[Candidate]], list[Result]]:
    import ray

    if parallel is None:
        parallel = ray.is_initialized()
    if not parallel:
        return lambda chunk: _evaluate_chunk(cluster, costs, chunk, workload)
    task = ray.remote(num_cpus=1)(_evaluate_chunk)
    refs = [ray.put(cluster), ray.put(costs), ray.put(workload)]
    workers = max(1, int(ray.available_resources().get("CPU", 1)))

    def run(chunk: list[Candidate]) -> list[Result]:
        if not chunk:
            return []
        size = math.ceil(len(chunk) / workers)
        parts = [chunk[j : j + size] for j in range(0, len(chunk), size)]
        return [
            r
            for part in ray.get([task.remote(refs[0], refs[1], p, refs[2]) for p in parts])
            for r in part
        ]

    return run
