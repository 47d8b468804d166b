"""The ingest pool: one Ray actor per data dir that runs the ingest queue (``jobs.JobRunner``)
outside the API processes, so any number of API replicas accept videos and one pool indexes
them.

It is a named actor (``_actors.actor_name(cfg, "ingest")``): every ``Service`` on the same
catalog and data dir finds the running pool instead of starting another. It owns its own
catalog connection, a ``ShardSet`` attached to the data dir's shard replicas, and the indexer
(extractors and node aggregators, which die with it). Ray restarts it when it dies
(``max_restarts=-1``); its next incarnation keeps the name, so it retakes at once the jobs the
last one held (``Catalog.expire_leases``), from the start of their videos (the same vector
ids: each frame once). Any other pool takes a job over once its lease runs out.

It also follows the applied placement plan (``plan/follow.py``): it owns the node
aggregators, so it is where their link readings are watched and a lasting change of a link
is planned for, once per data dir however many API replicas there are; its extractors and
aggregators then move to the new plan between jobs (``JobRunner.replan``).

It also runs the data dir's reindex while the service serves (``live_reindex.py``): the
one writer of videos is where their embedding can be held for the switch.

It also sends the data dir's webhook events (``hooks.delivery.Deliverer``, a thread): once
per data dir, as the jobs whose ends they tell of run here.

With ``cfg.shared_actors`` (a cluster) it is detached and outlives any one API replica; else
the Service that started it stops it on close.
"""

from __future__ import annotations

from dataclasses import replace

import ray

from vifusion.cluster.actors import HEAD_RESOURCE, NAMESPACE, actor_name, find_actor, kill_named
from vifusion.config import Config
from vifusion.hooks.delivery import Deliverer
from vifusion.ingest.jobs import IngestStats, JobRunner
from vifusion.ingest.live_reindex import LiveReindex
from vifusion.plan.follow import PlanFollower, Readings
from vifusion.runtime import Runtime


class IngestPool:
    """The actor: a runtime of its own (no writer lock: the API replicas hold the data dir),
    the job runner, leasing jobs as ``name/<incarnation>``, the plan follower and the webhook
    deliverer."""

    def __init__(self, cfg: Config, name: str) -> None:
        self.rt = Runtime(cfg)  # resolves the applied plan: ``rt.cfg.plan``
        try:
            self.jobs = JobRunner(self.rt.cfg, self.rt, name)
        except BaseException:
            self.rt.close()
            raise
        self.follower = PlanFollower(self.rt.cfg, on_applied=self.jobs.replan)
        self.follower.start(self.link_readings)
        self.hooks = Deliverer(self.rt.cfg, self.rt.catalog)
        self.hooks.start()
        self.reindexer = LiveReindex(self.rt, self.jobs)

    def wake(self) -> None:
        self.jobs.wake()

    def stats(self) -> IngestStats:
        return replace(
            self.jobs.stats,
            replans=self.follower.replans,
            plan_predicted_fps=self.follower.predicted_fps,
            extractors=self.jobs.extractors,
        )

    def fusion_stats(self) -> list[dict]:
        return self.jobs.fusion_stats()

    def reindex(self, visual_model: str) -> dict:
        """Start embedding the library with ``visual_model`` (``live_reindex.py``); ReindexBusy
        while one runs."""
        return self.reindexer.start(visual_model).to_dict()

    def reindex_state(self) -> dict:
        return self.reindexer.state.to_dict() | {"index_model": self.rt.cfg.visual_model}

    def link_readings(self) -> Readings:
        """What the plan follower reads each round: the aggregators' stats and the node of
        each shard's primary; none before the first job starts the aggregators."""
        if self.rt.running_indexer() is None:
            return [], []
        primaries = ray.get([h.node_id.remote() for h in self.rt.shards.handles], timeout=30)
        return self.jobs.fusion_stats(), primaries

    def close(self) -> None:
        """Stop taking jobs and stop the extractors (jobs running now run again elsewhere)."""
        self.follower.close()
        self.hooks.close()
        self.jobs.close()
        self.rt.close()


class Pool:
    """A Service's handle to its data dir's ingest pool: attaches to the running one, or
    starts it (then this handle stops it on ``close`` unless it is shared)."""

    def __init__(self, cfg: Config) -> None:
        self.name = actor_name(cfg, "ingest")
        self._shared = cfg.shared_actors
        self.actor = find_actor(self.name)
        self._owned = self.actor is None
        self._stopped = False
        if self.actor is None:
            # num_cpus=0: it mostly waits on its extractors, which have CPUs of their own.
            # max_task_retries=-1: a wake or a stats call made while it restarts waits for it.
            # On the head, whose data dir holds the uploads the API replicas store.
            self.actor = (
                ray.remote(IngestPool)
                .options(
                    name=self.name,
                    namespace=NAMESPACE,
                    get_if_exists=True,
                    lifetime="detached" if cfg.shared_actors else None,
                    num_cpus=0,
                    max_concurrency=4,
                    max_restarts=-1,
                    max_task_retries=-1,
                    resources={HEAD_RESOURCE: 0.001},
                )
                # the data dir as this process finds it, whatever the pool's working directory
                .remote(cfg.updated({"data_dir": cfg.data_dir.resolve()}), self.name)
            )
        self.stats  # noqa: B018 (a pool that cannot start fails here)

    def wake(self) -> None:
        """A job was queued (the pool also looks every few seconds: a lost wake only waits)."""
        self.actor.wake.remote()

    @property
    def stats(self) -> IngestStats:
        return ray.get(self.actor.stats.remote())

    def fusion_stats(self) -> list[dict]:
        return ray.get(self.actor.fusion_stats.remote())

    def reindex(self, visual_model: str) -> dict:
        return ray.get(self.actor.reindex.remote(visual_model))

    def reindex_state(self) -> dict:
        return ray.get(self.actor.reindex_state.remote())

    def close(self) -> None:
        """Let go of the pool; stop it if this handle started it and it is not shared."""
        if self._owned and not self._shared:
            self.shutdown()

    def shutdown(self) -> None:
        """Stop the pool, shared or not (the end of a cluster's service, or of a test)."""
        if self._stopped:
            return
        self._stopped = True
        try:
            ray.get(self.actor.close.options(max_task_retries=0).remote(), timeout=60)
        except ray.exceptions.RayError:
            pass  # dead or stuck: killed below all the same
        kill_named(self.actor, self.name)
