"""`vifusion check`: do the catalog and the shards agree?

Drift it finds (after a crash, a lost disk, a hand-edited data dir):

- ``missing``: a video the catalog calls ready has no vectors in its shard. Repair: its job
  is queued again (the service re-indexes it at its next start, from the kept media).
- ``orphan``: a shard holds vectors of a video the catalog does not call ready (deleted,
  failed, or a job a crash interrupted). Repair: the vectors are deleted; a job still queued
  indexes its video from the start anyway.
- ``misplaced``: vectors in a shard other than the one the video routes to, where no search
  for it would look. Repair: deleted there (and the video re-queued when that leaves it
  with none).
"""

from __future__ import annotations

from dataclasses import dataclass

import ray

from vifusion.catalog import Catalog
from vifusion.index import ShardSet, shard_for


@dataclass(frozen=True)
class Drift:
    kind: str  # missing | orphan | misplaced
    video_id: int
    shard: int
    detail: str


def find_drift(catalog: Catalog, shards: ShardSet) -> list[Drift]:
    """Every disagreement between the catalog's ready videos and what the shards hold."""
    ready = catalog.ready_ids()
    held: dict[int, set[int]] = {}
    for shard_no, handle in enumerate(shards.handles):
        for v in ray.get(handle.video_ids.remote()):
            held.setdefault(v, set()).add(shard_no)
    out = []
    for v in sorted(ready | held.keys()):
        home = shard_for(v, shards.num_shards)
        where = held.get(v, set())
        if v in ready and home not in where:
            out.append(Drift("missing", v, home, f"ready in the catalog, no vectors in shard {home}"))
        if v not in ready and where:
            video = catalog.get_video(v)
            state = "not in the catalog" if video is None else f"{video.status} in the catalog"
            out.extend(Drift("orphan", v, s, f"vectors in shard {s}, {state}") for s in sorted(where))
        elif v in ready:
            out.extend(Drift("misplaced", v, s, f"vectors in shard {s}, routed to shard {home}")
                       for s in sorted(where - {home}))
    return out


def repair(drift: list[Drift], catalog: Catalog, shards: ShardSet) -> None:
    """Make the catalog and the shards agree (see the module's docstring)."""
    for d in drift:
        if d.kind in ("orphan", "misplaced"):
            ray.get(shards.handles[d.shard].delete_video.remote(d.video_id))
        else:
            catalog.requeue(d.video_id, f"re-indexing: {d.detail}")
