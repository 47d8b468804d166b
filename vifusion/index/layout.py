"""Where a data dir keeps its shards, and which shard holds a video. No Ray here: a reader
in the command line's process (``local.py``) needs this as much as the shard actors do."""

from __future__ import annotations

import json
import os
from pathlib import Path

from vifusion.datadir import INDEX

LAYOUT = Path(INDEX) / "layout.json"


def shard_for(video_id: int, num_shards: int) -> int:
    """The shard that holds a video: stable across runs for a fixed ``num_shards``."""
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    return video_id % num_shards


def shard_dir(data_dir: Path, shard_no: int) -> Path:
    """Where shard ``shard_no`` keeps its snapshot and log."""
    return Path(data_dir) / INDEX / f"shard-{shard_no}"


def replica_dir(data_dir: Path, shard_no: int, replica: int) -> Path:
    """Where replica ``replica`` of a shard keeps its own snapshot and log: the primary
    (0) in ``shard_dir``, as before replicas had their own, so older data dirs open as they
    are; the others beside it, so replicas on one machine never share a directory (on a
    cluster each node has its own data dir at the same path)."""
    base = shard_dir(data_dir, shard_no)
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
