"""The placement search (``vifusion plan``): candidate placements, pruned, the rest simulated;
the fastest wins. (Not a search of the index: that is ``query/searcher.py``.)

Candidates: how many extractors on each node type (every node of a type alike, from none
to one per core: an extractor asks Ray for one CPU), which node type holds the shards
(primaries and replicas spread over its nodes as ``placement.spread`` does, or over every
node: the even spread), and the fusion size limits. Three prunings come before any
simulation (``bounds.py``):

- **infeasible**: no extractor at all, or a node's memory short of its extractors' models
  and its shard replicas' vectors;
- **dominated**: an upper bound on the candidate's frames/s below the best simulated so
  far. The bound holds for every run the simulator can make. Candidates are simulated in
  order of their bound, so most of them never need a simulation, and one whose bound at
  best ties the best found is not simulated either;
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
replicas (``search_placements``' ``api_replicas``, where searches are planned) let more
searches be in flight at once where each waits on far shards; each holds a model in the
head's memory, so more are kept only where they cut the searches' p50 by over ``_API_GAIN``.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from vifusion.cluster.placement import spread
from vifusion.plan.bounds import busy, feasible, upper_bound
from vifusion.plan.hardware import Cluster, NodeType
from vifusion.plan.simulate import simulate
from vifusion.plan.terms import Candidate, Result, StageCosts, Workload

FUSION_LIMITS = ((64 << 10, 8 << 20), (256 << 10, 8 << 20), (64 << 10, 1 << 20))
_TIE = 1e-6
_FLOOR_LEVELS = (1, 2)  # codec floors tried: fp16 and int8 (the lossy codecs needing no tables)
_FLOOR_GAIN = 0.02
_API_GAIN = 0.1


@dataclass(frozen=True)
class Evaluated:
    candidate: Candidate
    result: Result


@dataclass
class PlacementReport:
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


def search_placements(
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
) -> PlacementReport:
    """The best candidate of ``space`` (default: ``candidates``) for ``workload``, with the
    runner-up and the even spread beside it. ``api_replicas``: the API replica counts to try,
    the first (the configured count) for every placement, the others for the best few where
    searches are planned. ``parallel``: simulate on Ray (None: when Ray is up)."""
    t0 = time.perf_counter()
    if space is None:  # placements first, then the fusion limits and codec floors of the best few
        among = functools.partial(  # the same search, over a space of its own
            search_placements,
            cluster,
            costs,
            workload,
            num_shards=num_shards,
            replicas=replicas,
            api_replicas=api_replicas,
            parallel=parallel,
            batch=batch,
        )
        placements = candidates(cluster, num_shards, replicas, FUSION_LIMITS[:1], api_replicas[0])
        first = among(space=list(placements), prune=prune)
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
        second = among(space=top + variants, prune=False)
        ranked = _replicas_that_pay(_floors_that_pay(second.ranked), workload)
        return PlacementReport(
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
    return PlacementReport(
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
