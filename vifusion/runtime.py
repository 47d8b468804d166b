"""What a command needs, opened from one Config: Ray, the catalog, the shards, and on
demand the indexer (extractor actors) and the searcher (a query embedder)."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from functools import cached_property
from typing import Any

import ray

from vifusion import datadir
from vifusion._files import storage_writes
from vifusion.catalog import Catalog, open_catalog
from vifusion.cluster.placement import applied_plan
from vifusion.config import Config
from vifusion.index import ShardSet
from vifusion.index.layout import index_dir
from vifusion.index.model import with_index_model

# Settings of every Ray that runs ViFusion, as environment variables of its processes: a
# Ray started here inherits them, `ray up` clusters export them (deploy/cluster*.yaml).
# Arguments up to 1 MiB ride inline in the actor call instead of going through the object
# store. Extractors hand the node aggregator 16 frames or more (over 100 KiB, Ray's default
# limit) at a time; through the object store each hand-over costs the two workers and the
# raylet more than twice the CPU (benchmarks/handoff.py). Fused batches to shards ride inline
# up to the same limit (comm/transport.py: at 1 Gbit 1 MiB inline carried as much as 3-4 MiB
# through the object store, at a third of the latency, once acknowledgements stopped holding
# up the sender).
RAY_TUNED = {"RAY_max_direct_call_object_size": str(1 << 20)}


def tune_ray() -> None:
    """Set ``RAY_TUNED`` for a Ray this process is about to start (values set already win)."""
    for name, value in RAY_TUNED.items():
        os.environ.setdefault(name, value)


def with_applied_plan(cfg: Config) -> Config:
    """``cfg`` with the plan in force resolved (``placement.applied_plan``: DATA_DIR/plan.json
    as checked, or None): read once here, where a runtime starts, then handed down as
    ``cfg.plan``; the stages place by it and never read plan.json themselves."""
    return cfg.updated({"plan": applied_plan(cfg)})


class Runtime:
    """Use as a context manager; ``writer=True`` takes the data dir's writer lock.

    The lock (``datadir.writer_lock``) keeps apart the processes that would write the
    data dir's files each through actors of its own: `vifusion index`, `vifusion check
    --repair`, a service that starts its own Ray or whose actors are its own (not
    ``cfg.shared_actors``). Those hold it alone: a second such process, or one beside a
    service, is refused (``datadir.DataDirBusy``). API replicas whose shard replicas and ingest pool are
    shared (``shared=True`` with ``cfg.shared_actors``, on a Ray they join) write only through
    those actors: they hold it together, any number of them, and still keep the others out.
    """

    def __init__(
        self, cfg: Config, writer: bool = False, wait_s: float = 0.0, shared: bool = False
    ) -> None:
        """``wait_s``: how long to wait for another writer to let go of the data dir (a
        service replica being replaced hands over to its successor this way). ``shared``: a
        process that writes only through the shared actors (an API replica): the lock is
        held shared where ``cfg.shared_actors`` and Ray runs already or is joined. The
        applied plan is resolved here (``with_applied_plan``): ``self.cfg`` carries it, and
        the index's visual model (``model.with_index_model``): a data dir is searched and fed
        with the model that made its vectors, whatever ``cfg.visual_model`` asks a reindex for."""
        cfg = self.cfg = with_applied_plan(cfg)
        self._lock = None
        if writer:
            together = (
                shared
                and cfg.shared_actors
                and (ray.is_initialized() or cfg.ray_address is not None)
            )
            self._lock = datadir.writer_lock(cfg.data_dir, shared=together, wait_s=wait_s)
        else:
            with contextlib.suppress(OSError):  # a reader of a data dir it may not write to
                cfg.data_dir.mkdir(parents=True, exist_ok=True)
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            if cfg.ray_address is None:
                tune_ray()
            ray.init(
                address=cfg.ray_address,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
            )
        self.catalog: Catalog | None = None
        self._following = threading.Lock()
        self._retired: list[ShardSet] = []
        try:
            with storage_writes(cfg.data_dir, "it cannot be opened"):
                self.catalog = open_catalog(cfg)
                self.cfg = with_index_model(self.cfg)
                self.shards = ShardSet(self.cfg)
        except BaseException:
            self._release()
            raise

    @cached_property
    def indexer(self):
        from vifusion.ingest.indexer import Indexer

        return Indexer(self.cfg, self.catalog, self.shards)

    def running_indexer(self):
        """The indexer if its extractors exist, else None; never starts one (a reader on
        another thread must not start the extractors, nor race their restart)."""
        return self.__dict__.get("indexer")

    def stop_indexer(self) -> None:
        """Stop the extractors and node aggregators; the next use of ``indexer`` starts them
        again, placed by ``cfg.plan``."""
        indexer = self.__dict__.pop("indexer", None)
        if indexer is not None:
            indexer.close()

    def use_plan(self, plan: dict[str, Any] | None) -> None:
        """Place by ``plan`` from now on (one applied while running: ``plan/follow.py``): the
        extractors and node aggregators stop, and the next use of ``indexer`` starts them by
        it. The shards stay where they are: they hold the index."""
        self.stop_indexer()
        self.cfg = self.cfg.updated({"plan": plan})

    def follow_index(self) -> ShardSet | None:
        """Move to the shard set in use where a reindex switched it since this runtime opened
        its own (``layout.switch_index``): the new set's shard actors, its visual model for
        the searcher and the extractors (both started again on their next use). Returns the
        set left behind (None where nothing moved); its actors answer the calls already sent
        to them until the reindex stops them. A file read a call: every request asks."""
        if index_dir(self.cfg.data_dir) == self.shards.folder:
            return None
        with self._following:
            if index_dir(self.cfg.data_dir) == self.shards.folder:
                return None
            old = self.shards
            self.stop_indexer()
            self.cfg = with_index_model(self.cfg)
            self.shards = ShardSet(self.cfg)
            self.__dict__.pop("searcher", None)
            self._retired.append(old)
            logging.getLogger(__name__).warning(
                "now serving the shard set %s (%s)", self.shards.folder.name, self.cfg.visual_model
            )
            return old

    @cached_property
    def searcher(self):
        import torch

        from vifusion.extract.backbone import load_backbone
        from vifusion.query.searcher import Searcher

        torch.set_num_threads(self.cfg.query_threads)
        return Searcher(self.cfg, self.shards, load_backbone(self.cfg), self.catalog)

    def close(self) -> None:
        self.stop_indexer()
        for shards in [*self._retired, self.shards]:
            shards.close()
        self._release()

    def _release(self) -> None:
        if self.catalog is not None:
            self.catalog.close()
        if self._owns_ray:
            ray.shutdown()
        if self._lock is not None:
            self._lock.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
