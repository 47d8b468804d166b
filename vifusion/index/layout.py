"""Where a data dir keeps its shards, and which shard holds a video. No Ray here: a reader
in the command line's process (``local.py``) needs this as much as the shard actors do.

The shard set in use is ``index/`` itself (every data dir before reindexing existed), or the
folder ``index/current`` names: ``vifusion reindex`` builds a new set in ``index/gen-<k>``
while the old one answers, then switches by replacing that file (one atomic rename), then
removes the old set.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from vifusion._files import fsync_dir
from vifusion.datadir import INDEX

LAYOUT = Path(INDEX) / "layout.json"
CURRENT = Path(INDEX) / "current"  # the folder of the shard set in use, where not index/


def shard_for(video_id: int, num_shards: int) -> int:
    """The shard that holds a video: stable across runs for a fixed ``num_shards``."""
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    return video_id % num_shards


def index_dir(data_dir: Path) -> Path:
    """The folder of the shard set in use: the one ``index/current`` names, else ``index/``."""
    try:
        name = (Path(data_dir) / CURRENT).read_text().strip()
    except FileNotFoundError:
        return Path(data_dir) / INDEX
    return Path(data_dir) / INDEX / name


def shard_dir(data_dir: Path, shard_no: int, folder: Path | None = None) -> Path:
    """Where shard ``shard_no`` keeps its snapshot and log: in the set in use, or in ``folder``."""
    return (folder or index_dir(data_dir)) / f"shard-{shard_no}"


def new_index_dir(data_dir: Path) -> Path:
    """A new, empty folder for a shard set: ``index/gen-<k>``, k past every one there."""
    root = Path(data_dir) / INDEX
    root.mkdir(parents=True, exist_ok=True)
    taken = [int(p.name[4:]) for p in root.glob("gen-*") if p.name[4:].isdigit()]
    folder = root / f"gen-{max(taken, default=0) + 1}"
    folder.mkdir()
    return folder


def switch_index(data_dir: Path, folder: Path) -> Path:
    """Make ``folder`` the shard set in use (temp file, rename, directory synced: a reader
    sees the old set or the new, never neither); return the folder in use before."""
    old = index_dir(data_dir)
    path = Path(data_dir) / CURRENT
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(Path(folder).name)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return old


def remove_index(data_dir: Path, folder: Path) -> None:
    """Remove a shard set no longer in use: ``index/gen-<k>`` whole, or, for ``index/``
    itself, its shard folders (the layout, the pointer and the newer sets stay)."""
    folder = Path(folder)
    if folder == index_dir(data_dir):
        raise ValueError(f"{folder} is the shard set in use")
    if folder == Path(data_dir) / INDEX:
        for shard in folder.glob("shard-*"):
            shutil.rmtree(shard)
    else:
        shutil.rmtree(folder)


def remove_unused(data_dir: Path) -> None:
    """Remove every shard set not in use: what a reindex cut short left, before its switch
    (the new set) or after it (the old). Only the data dir's one writer reindexes, so no set
    is being built meanwhile."""
    root = Path(data_dir) / INDEX
    for folder in [root, *root.glob("gen-*")]:
        if folder != index_dir(data_dir) and folder.is_dir():
            remove_index(data_dir, folder)


def replica_dir(data_dir: Path, shard_no: int, replica: int, folder: Path | None = None) -> Path:
    """Where replica ``replica`` of a shard keeps its own snapshot and log: the primary
    (0) in ``shard_dir``, as before replicas had their own, so older data dirs open as they
    are; the others beside it, so replicas on one machine never share a directory (on a
    cluster each node has its own data dir at the same path). In the set in use, or ``folder``."""
    base = shard_dir(data_dir, shard_no, folder)
    return base if replica == 0 else base.with_name(f"{base.name}-replica-{replica}")


def built_shards(data_dir: Path) -> int | None:
    """The shard count the data dir was built with (None: no shards yet). Reads only."""
    try:
        return int(json.loads((Path(data_dir) / LAYOUT).read_text())["num_shards"])
    except FileNotFoundError:
        return None


def refuse_other_count(data_dir: Path, built: int, num_shards: int) -> None:
    """ValueError where ``num_shards`` is not the count the data dir was built with, since
    routing by ``video_id % num_shards`` would then look for videos on the wrong shard."""
    if built != num_shards:
        raise ValueError(
            f"{data_dir} was built with {built} shards, not {num_shards}: "
            f"use num_shards={built} (VIFUSION_NUM_SHARDS={built}) with this data dir"
        )


def check_layout(data_dir: Path, num_shards: int) -> None:
    """Record the shard count of a new data dir; refuse a different one later."""
    built = built_shards(data_dir)
    if built is not None:
        refuse_other_count(data_dir, built, num_shards)
        return
    path = Path(data_dir) / LAYOUT
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"num_shards": num_shards}))
    os.replace(tmp, path)
