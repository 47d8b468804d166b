"""`vifusion check`: do the catalog and the shards agree, and is anything left over?

Drift it finds (after a crash, a lost disk, a hand-edited data dir):

- ``missing``: a video the catalog calls ready has no vectors in its shard. Repair: its job
  is queued again (the service re-indexes it at its next start, from the kept media).
- ``orphan``: a shard holds vectors of a video the catalog does not call ready (deleted,
  failed, or a job a crash interrupted). Repair: the vectors are deleted; a job still queued
  indexes its video from the start anyway.
- ``misplaced``: vectors in a shard other than the one the video routes to, where no search
  for it would look. Repair: deleted there (and the video re-queued when that leaves it
  with none).

And files under the data dir that nothing will use again (``leftover``). Repair: removed.

- a stored media folder no catalog row names: its video was deleted (and the crash came
  before its files went), or the crash came between storing an upload and writing its row;
- the stored media of a failed video: failed is final (no job runs it again), so nothing
  reads it but a download of the failed video's file, which then answers 404;
- a temp file a crash left mid-write (named ``TEMP_PREFIX`` + the file's name).

Only media the service stored (``DATA_DIR/media/<32 hex>/``) is judged: ``file://`` videos,
read where they are, are never touched. The data dir must be quiet (the CLI holds its
writer lock): a running service has uploads in flight under temp names, before their rows.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import ray

from vifusion._files import TEMP_PREFIX, StorageError
from vifusion.catalog import Catalog, Video
from vifusion.cli.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from vifusion.config import Config
from vifusion.datadir import MEDIA
from vifusion.index import ShardSet, shard_for

_STORED = re.compile(r"[0-9a-f]{32}")  # a media folder's name: the uuid new_media_path gave it


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
            out.append(
                Drift("missing", v, home, f"ready in the catalog, no vectors in shard {home}")
            )
        if v not in ready and where:
            video = catalog.get_video(v)
            state = "not in the catalog" if video is None else f"{video.status} in the catalog"
            out.extend(
                Drift("orphan", v, s, f"vectors in shard {s}, {state}") for s in sorted(where)
            )
        elif v in ready:
            out.extend(
                Drift("misplaced", v, s, f"vectors in shard {s}, routed to shard {home}")
                for s in sorted(where - {home})
            )
    return out


def repair(drift: list[Drift], catalog: Catalog, shards: ShardSet) -> None:
    """Make the catalog and the shards agree (see the module's docstring)."""
    for d in drift:
        if d.kind in ("orphan", "misplaced"):
            ray.get(shards.handles[d.shard].delete_video.remote(d.video_id))
        else:
            catalog.requeue(d.video_id, f"re-indexing: {d.detail}")


@dataclass(frozen=True)
class Leftover:
    path: Path  # a file or a whole folder
    detail: str


def find_leftovers(data_dir: Path, catalog: Catalog) -> list[Leftover]:
    """Every file under the data dir that nothing will use again (see the module's docstring)."""
    owner: dict[str, Video] = {}  # media folder name -> the video whose file it holds
    for v in _all_videos(catalog):
        if v.media and Path(v.media).parent.parent.name == MEDIA:
            owner[Path(v.media).parent.name] = v
    out = []
    media = data_dir / MEDIA
    for folder in sorted(media.iterdir()) if media.is_dir() else []:
        if not (folder.is_dir() and _STORED.fullmatch(folder.name)):
            continue  # not a folder the service made: not for check to judge
        v = owner.get(folder.name)
        if v is None:
            out.append(Leftover(folder, "stored media no video in the catalog names"))
        elif v.status == "failed":
            out.append(Leftover(folder, f"stored media of video {v.id}, which failed"))
        else:
            out.extend(
                Leftover(p, f"a temp file a crash left (video {v.id})")
                for p in sorted(folder.glob(TEMP_PREFIX + "*"))
            )
    return out


def remove_leftovers(leftovers: list[Leftover]) -> None:
    """Remove each leftover; one that cannot be removed stays (a second look reports it)."""
    for item in leftovers:
        with contextlib.suppress(OSError):
            if item.path.is_dir():
                shutil.rmtree(item.path)
            else:
                item.path.unlink()


def _all_videos(catalog: Catalog) -> Iterator[Video]:
    after = 0
    while page := catalog.list_videos(1000, after):
        yield from page
        after = page[-1].id


def cmd_check(cfg: Config, fix: bool) -> int:
    """`vifusion check [--repair]` on a quiet data dir: 0 consistent (or all repaired), 1
    problems found (or left), 2 the data dir could not be checked."""
    from ray.exceptions import RayActorError

    from vifusion.datadir import DataDirBusy
    from vifusion.runtime import Runtime

    try:
        rt = Runtime(
            cfg, writer=True
        )  # a running service changes both sides: check a quiet data dir
    except (DataDirBusy, ValueError, StorageError) as e:
        print(f"vifusion check: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (
        RayActorError
    ) as e:  # a shard refused to start (a damaged log or snapshot): its reason, not Ray's
        # Ray's last line is "package.module.Error: reason": the error's name and reason say it
        why = re.sub(r"^(?:\w+\.)+(?=\w+: )", "", str(e).strip().splitlines()[-1])
        print(f"vifusion check: a shard cannot start: {why}", file=sys.stderr)
        return EXIT_FAILED
    with rt:
        drift = find_drift(rt.catalog, rt.shards)
        leftovers = find_leftovers(cfg.data_dir, rt.catalog)
        ready = len(rt.catalog.ready_ids())
        for d in drift:
            print(f"{d.kind:9} video {d.video_id}: {d.detail}")
        for item in leftovers:
            print(f"leftover  {item.path.relative_to(cfg.data_dir)}: {item.detail}")
        found = len(drift) + len(leftovers)
        if found and fix:
            repair(drift, rt.catalog, rt.shards)
            remove_leftovers(leftovers)
            left = len(find_drift(rt.catalog, rt.shards)) + len(
                find_leftovers(cfg.data_dir, rt.catalog)
            )
            print(
                f"repaired {found} problem(s); {left} left"
                + (
                    "; queued videos are indexed again when the service starts"
                    if any(d.kind == "missing" for d in drift)
                    else ""
                )
            )
            return EXIT_FAILED if left else EXIT_OK
    if not found:
        print(
            f"consistent: {ready} ready video(s), every one in its shard, nothing else there; no leftover files"
        )
        return EXIT_OK
    print(f"{found} problem(s); `vifusion check --repair` fixes them", file=sys.stderr)
    return EXIT_FAILED
