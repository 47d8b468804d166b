"""Route videos to shards and fan searches out to the Ray shard replicas.

Each shard runs as ``cfg.shard_replicas`` actors (``replica.py``), spread over nodes. Writes
go to the primary; searches go round-robin, one that meets a dead replica is re-sent to
another, and concurrent searches of one space are batched into one call per shard
(``batching.py``). Replicas are named actors (``_actors.py``): a second ShardSet on the
same data dir (another API replica, the ingest pool) attaches to the running ones. Each
replica keeps its own directory (``layout.replica_dir``) and copies from the others over
Ray: no disk is shared. Limits: a video's shard is ``video_id % num_shards``, so a data dir
is tied to its shard count (``index/layout.json``; another is refused).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable

import numpy as np
import ray

from vifusion.cluster.actors import NAMESPACE, actor_name, find_actor, kill_named
from vifusion.cluster.placement import (
    planned_shard_strategies,
    shard_resources,
    shard_strategies,
)
from vifusion.config import Config
from vifusion.datadir import INDEX
from vifusion.index._seal import data_dir_key
from vifusion.index.batching import QueryBatcher, ShardResult
from vifusion.index.layout import (  # noqa: F401 (imported from here too)
    check_layout,
    index_dir,
    replica_dir,
    shard_dir,
    shard_for,
)
from vifusion.index.merge import merge_topk
from vifusion.index.replica import CatchingUp, ShardReplica
from vifusion.index.shard import check_queries
from vifusion.types import SPACES, Found

_INLINE_BYTES = 64 << 10  # past this, one put for every shard beats a copy in each call
_DOWN_S = 2.0  # how long a replica that failed a search is passed over
_PLACE_TRIES = 5  # starts of a replica that Ray keeps placing off its node
_MISSING = -2  # the ids of a shard that did not answer (-1: no hit), through batching and merge


def _missing(nq: int, k: int) -> ShardResult:
    return (
        np.full((nq, k), -np.inf, np.float32),
        np.full((nq, k), _MISSING, np.int64),
        np.zeros((nq, k, 2), np.float32),
    )


def _is_missing(r: ShardResult) -> bool:
    return r[1].size > 0 and bool((r[1] == _MISSING).all())


class ShardSet:
    """Driver-side handle to the shard replicas; holds no vectors itself.

    Needs ``ray.init`` first. Each replica loads its shard's snapshot + log on start.
    """

    def __init__(self, cfg: Config) -> None:
        """The replicas of the shard set in use (``layout.index_dir``), started or found:
        each set's actors are named after its folder (``generation``), so a reindex's new set
        starts beside the old one, which answers until every process has moved to the new."""
        check_layout(cfg.data_dir, cfg.num_shards)
        self.folder = index_dir(cfg.data_dir)
        # "" for index/ itself (a data dir never reindexed: its actors keep their names)
        self.generation = "" if self.folder.name == INDEX else self.folder.name
        self._cfg = cfg
        # num_cpus=0: shards mostly sit idle between searches and must not take the CPU
        # slots that extractors are scheduled on; max_concurrency=1: one call at a time.
        # OMP_WAIT_POLICY=PASSIVE: FAISS's OpenMP threads otherwise spin after every search,
        # ~9 ms of CPU per one-query search on 2 cores (against 0.2 ms of real work).
        # max_restarts / max_task_retries: a replica that dies comes back from snapshot +
        # log, and the writes sent to it meanwhile are retried, so none is lost. Nodes: see
        # placement.py (spread, a shard's replicas on different nodes; one whose node is lost
        # is restarted on another shard node and catches up there, replica.py).
        actor = ray.remote(ShardReplica)
        key = data_dir_key(cfg.data_dir) if cfg.shard_replicas > 1 else None
        opts = dict(
            num_cpus=0,
            max_concurrency=1,
            max_restarts=-1,
            max_task_retries=-1,
            resources=shard_resources(),
            runtime_env={"env_vars": {"OMP_WAIT_POLICY": "PASSIVE"}},
        )
        where = planned_shard_strategies(
            cfg.plan, cfg.num_shards, cfg.shard_replicas
        ) or shard_strategies(cfg.num_shards, cfg.shard_replicas)
        self._replicas: list[list[ray.actor.ActorHandle]] = []
        self._owned: list[tuple[ray.actor.ActorHandle, str]] = []  # started here, not found
        self._down: dict[tuple[int, int], float] = {}
        self._turn = itertools.count()
        self._batchers: dict[str, QueryBatcher] = {}
        self._shared = cfg.shared_actors
        # Detached where shared, and for a reindex's set (the ingest pool starts it, and the
        # set must outlive a restart of the pool); else they die with the process that
        # started them. ``close`` stops those started here unless they are shared.
        lifetime = "detached" if cfg.shared_actors or self.generation else None
        # (shard, replica) -> (handle, name) of the replicas started here, not found running
        started: dict[tuple[int, int], tuple[ray.actor.ActorHandle, str]] = {}

        def start(n: int, r: int) -> ray.actor.ActorHandle:
            names = [self._name(n, i) for i in range(cfg.shard_replicas)]
            directory = replica_dir(cfg.data_dir, n, r, self.folder)
            args = (n, directory, cfg) + ((names[1:], None) if r == 0 else (None, names[0]))
            args += (key,)
            handle = actor.options(
                **opts,
                name=names[r],
                namespace=NAMESPACE,
                get_if_exists=True,
                lifetime=lifetime,
                scheduling_strategy=where[n][r],
            ).remote(*args)
            started[(n, r)] = (handle, names[r])
            return handle

        try:
            for n in range(cfg.num_shards):
                group = []
                for r in range(cfg.shard_replicas):
                    handle = find_actor(self._name(n, r))
                    group.append(handle if handle is not None else start(n, r))
                self._replicas.append(group)
            # Ray's soft node affinity (soft, so that a replica whose node is lost starts
            # again elsewhere) now and then starts an actor on another live node, which could
            # put two replicas of a shard on one node: those are started again.
            for _ in range(_PLACE_TRIES):
                keys = list(started)
                placed = ray.get([started[key][0].node_id.remote() for key in keys])
                alive = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
                wrong = [
                    (n, r)
                    for (n, r), node in zip(keys, placed, strict=True)
                    if node != where[n][r].node_id and where[n][r].node_id in alive
                ]
                for n, r in wrong:
                    kill_named(*started.pop((n, r)))
                    self._replicas[n][r] = start(n, r)
                if not wrong:
                    break
            self._owned = list(started.values())
            # Surface a bad snapshot or directory here rather than on the first call.
            ray.get([h.stats.remote() for group in self._replicas for h in group])
        except BaseException:
            self._owned = list(started.values())
            self.close()
            raise
        self.query_batching = cfg.query_fusion  # the key's historical name

    @property
    def query_batching(self) -> bool:
        """Whether concurrent searches are batched (settable, e.g. to compare both ways)."""
        return bool(self._batchers)

    @query_batching.setter
    def query_batching(self, on: bool) -> None:
        if on and not self._batchers:
            cfg = self._cfg
            self._batchers = {
                space: QueryBatcher(
                    self._starter(space),
                    cfg.query_batch_max,
                    cfg.query_window,
                    cfg.query_wait_ms / 1000,
                )
                for space in SPACES
            }
        elif not on:
            for b in self._batchers.values():
                b.close()
            self._batchers = {}

    @property
    def handles(self) -> list[ray.actor.ActorHandle]:
        """The shards' primaries (where writes go), indexed by shard number."""
        return [group[0] for group in self._replicas]

    @property
    def replicas(self) -> list[list[ray.actor.ActorHandle]]:
        """Every replica of every shard, the primary first."""
        return [list(group) for group in self._replicas]

    @property
    def num_shards(self) -> int:
        return len(self._replicas)

    @property
    def batched_calls(self) -> dict[str, int]:
        """Batched search calls sent so far, per space (0 where query batching is off)."""
        return {space: self._batchers[space].calls if self._batchers else 0 for space in SPACES}

    def handle_for(self, video_id: int) -> ray.actor.ActorHandle:
        """The primary of the shard that holds (or will hold) a video's frames."""
        return self._replicas[shard_for(video_id, len(self._replicas))][0]

    def delete_video(self, video_id: int) -> int:
        """Remove a video from its shard, every kind of row; return how many were removed.
        Durable on return."""
        return ray.get(self.handle_for(video_id).delete_video.remote(video_id))

    def snapshot(self, shard_nos: Iterable[int] | None = None) -> None:
        """Snapshot the given shards (all when None) in parallel, so the next start replays
        less log; return when all are written."""
        nos = range(len(self._replicas)) if shard_nos is None else list(shard_nos)
        for n in nos:
            if not 0 <= n < len(self._replicas):
                raise ValueError(f"no shard {n}; there are {len(self._replicas)}")
        ray.get([self._replicas[n][0].snapshot.remote() for n in nos])

    def search(
        self, space: str, queries: np.ndarray, k: int, videos: Iterable[int] | None = None
    ) -> Found:
        """Top-k hits per query across all shards, best first: frames for ``visual`` and
        ``semantic``, speech segments for ``speech``, screen-text spans for ``screen`` (a
        hit's ``row`` is its key in the catalog's texts); with ``videos``, only those
        videos' rows (each shard is asked only about the videos it holds). A replica
        still catching up after a restart is passed over, as a dead one is. A shard with
        no live replica, or none that answers within ``search_shard_timeout_s``, is left
        out and named in ``missing``: a partial answer, never an error."""
        queries = check_queries(space, queries, k)
        if not self._replicas:
            raise RuntimeError("ShardSet is closed")
        if videos is None:
            shards = list(range(len(self._replicas)))
            if self._batchers:
                results = self._batchers[space].search(queries, k)
            else:
                results = self._starter(space)(queries, k)()
        else:
            per: dict[int, list[int]] = {}
            for v in videos:
                per.setdefault(shard_for(v, len(self._replicas)), []).append(int(v))
            if not per:
                return Found([[] for _ in range(len(queries))])
            shards, results = list(per), self._fan_out(space, queries, k, per)()
        missing = [n for n, r in zip(shards, results, strict=True) if _is_missing(r)]
        return Found(merge_topk(results, k), missing)

    def frames(
        self, space: str, video_id: int, start_s: float, end_s: float, limit: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """A video's stored frame vectors in a time range: see ``Shard.frames``."""
        handle = self.handle_for(video_id)
        return ray.get(handle.frames.remote(space, video_id, start_s, end_s, limit))

    def stats(self) -> list[dict]:
        """Each shard's stats (from its primary), by shard number, with its replica count."""
        stats = ray.get([group[0].stats.remote() for group in self._replicas])
        return [{**s, "replicas": len(group)} for s, group in zip(stats, self._replicas)]

    def close(self) -> None:
        """Stop the query batchers and let go of the replicas. Those this ShardSet started are
        killed (everything acknowledged is on disk), unless they are shared
        (``cfg.shared_actors``): then they outlive it, for the other API replicas."""
        self.query_batching = False
        if not self._shared:
            for handle, name in self._owned:
                kill_named(handle, name)
        self._owned = []
        self._replicas = []

    def shutdown(self) -> None:
        """Kill every replica of every shard, shared or not, found or started here (the end
        of a cluster's service, or of a test)."""
        self.query_batching = False
        for n, group in enumerate(self._replicas):
            for r, handle in enumerate(group):
                kill_named(handle, self._name(n, r))
        self._owned = []
        self._replicas = []

    def _name(self, n: int, r: int) -> str:
        """The actor name of replica ``r`` of shard ``n`` of this set."""
        gen = (self.generation,) if self.generation else ()
        return actor_name(self._cfg, "shard", *gen, n, r)

    # -- fan-out with fail-over ---------------------------------------------------------

    def _starter(self, space: str) -> Callable[[np.ndarray, int], Callable[[], list[ShardResult]]]:
        def start(queries: np.ndarray, k: int) -> Callable[[], list[ShardResult]]:
            return self._fan_out(space, queries, k, dict.fromkeys(range(len(self._replicas))))

        return start

    def _fan_out(
        self, space: str, queries: np.ndarray, k: int, per: dict[int, list[int] | None]
    ) -> Callable[[], list[ShardResult]]:
        """Send the search to one replica of each listed shard; return how to collect it."""
        # Large query sets: one copy in the object store, read by every shard. Small ones
        # (a single text or image query) travel inline: a put costs more than they weigh.
        arg = ray.put(queries) if queries.nbytes > _INLINE_BYTES else queries
        sent = [(n, *self._send(n, space, arg, k, vs)) for n, vs in per.items()]
        deadline = time.monotonic() + self._cfg.search_shard_timeout_s

        def collect() -> list[ShardResult]:
            out = []
            for n, r, ref in sent:
                while ref is not None:
                    try:
                        out.append(ray.get(ref, timeout=max(deadline - time.monotonic(), 0.001)))
                        break
                    except ray.exceptions.GetTimeoutError:
                        ref = None
                    except (ray.exceptions.RayActorError, CatchingUp):
                        self._down[(n, r)] = time.monotonic() + _DOWN_S
                        r, ref = self._send(n, space, arg, k, per[n])
                if ref is None:
                    out.append(_missing(len(queries), k))
            return out

        return collect

    def _send(
        self, n: int, space: str, arg, k: int, videos: list[int] | None
    ) -> tuple[int, ray.ObjectRef | None]:
        """Ask one live replica of shard ``n``; None where every one failed lately (Ray is
        restarting them: the search goes on without this shard)."""
        group = self._replicas[n]
        now = time.monotonic()
        live = [r for r in range(len(group)) if self._down.get((n, r), 0) <= now]
        if not live:
            return 0, None
        r = live[next(self._turn) % len(live)]
        return r, group[r].search.options(max_task_retries=0).remote(space, arg, k, videos)
