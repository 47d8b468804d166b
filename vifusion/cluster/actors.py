"""Names of the actors that every process serving one data dir shares.

Shard replicas and the ingest pool are named actors in one Ray namespace, named after the
data dir, so a second API replica (or the ingest pool) on the same data dir finds the ones
already running instead of starting its own copies over the same files.
"""

from __future__ import annotations

import hashlib
import time

import ray

from vifusion.config import Config

NAMESPACE = "vifusion"
# Ray gives the head node this resource, and no other: what must run beside the head's disk
# (the API replicas, the ingest pool: uploads and thumbnails live there) asks for a sliver.
HEAD_RESOURCE = "node:__internal_head__"


def actor_name(cfg: Config, *parts: object) -> str:
    """The name of one shared actor of ``cfg``'s data dir, e.g. ``shard-<dir>-0-1``. The data
    dir's path, not its inode: every node of a cluster mounts its own at the same path."""
    digest = hashlib.sha256(str(cfg.data_dir.resolve()).encode()).hexdigest()[:12]
    return "-".join([str(parts[0]), digest, *map(str, parts[1:])])


def find_actor(name: str) -> ray.actor.ActorHandle | None:
    """The live actor of that name in ViFusion's namespace, or None."""
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


def kill_named(handle: ray.actor.ActorHandle, name: str, wait_s: float = 10.0) -> None:
    """Kill an actor for good and wait until its name is free: ``ray.kill`` returns before
    the name is released, and a service reopened on the same data dir at once would otherwise
    attach to the dying actor."""
    ray.kill(handle)
    deadline = time.monotonic() + wait_s
    while find_actor(name) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
