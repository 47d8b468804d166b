"""Route videos to shards and fan searches out to the Ray shard actors.

Limits: a video's shard is ``video_id % num_shards``, so a data dir is tied to the shard
count it was built with (recorded in ``index/layout.json``; another count is refused).
A shard actor that dies loses what it held since its last commit and is not restarted.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import ray

from vifusion.config import Config
from vifusion.index.merge import merge_topk
from vifusion.index.shard import Shard, check_queries
from vifusion.types import SearchHit

_INLINE_BYTES = 64 << 10  # Ray passes arguments up to 100 KiB inline in the call


def shard_for(video_id: int, num_shards: int) -> int:
    """The shard that holds a video: stable across runs for a fixed ``num_shards``."""
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    return video_id % num_shards


def shard_dir(data_dir: Path, shard_no: int) -> Path:
    """Where shard ``shard_no`` keeps its snapshot."""
    return Path(data_dir) / "index" / f"shard-{shard_no}"


def check_layout(data_dir: Path, num_shards: int) -> None:
    """Record the shard count of a new data dir; refuse a different one later, since
    routing by ``video_id % num_shards`` would then look for videos on the wrong shard."""
    path = Path(data_dir) / "index" / "layout.json"
    if path.exists():
        built = json.loads(path.read_text())["num_shards"]
        if built != num_shards:
            raise ValueError(
                f"{data_dir} was built with {built} shards, not {num_shards}: "
                f"use num_shards={built} (VIFUSION_NUM_SHARDS={built}) with this data dir"
            )
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"num_shards": num_shards}))
    os.replace(tmp, path)


class ShardSet:
    """Driver-side handle to ``cfg.num_shards`` shard actors; holds no vectors itself.

    Needs ``ray.init`` first. Each actor loads its last snapshot on start.
    """

    def __init__(self, cfg: Config) -> None:
        check_layout(cfg.data_dir, cfg.num_shards)
        threads = cfg.faiss_threads or cfg.threads
        # num_cpus=0: shards mostly sit idle between searches and must not take the CPU
        # slots that extractors are scheduled on; max_concurrency=1 because a Shard is not
        # thread-safe.
        # OMP_WAIT_POLICY=PASSIVE: FAISS's OpenMP threads otherwise spin after every search,
        # ~9 ms of CPU per one-query search on 2 cores (against 0.2 ms of real work).
        actor = ray.remote(Shard).options(
            num_cpus=0, max_concurrency=1, runtime_env={"env_vars": {"OMP_WAIT_POLICY": "PASSIVE"}}
        )
        self._handles = [actor.remote(i, shard_dir(cfg.data_dir, i), threads) for i in range(cfg.num_shards)]
        try:
            # Surface a bad snapshot or directory here rather than on the first call.
            ray.get([h.stats.remote() for h in self._handles])
        except BaseException:
            self.close()
            raise

    @property
    def handles(self) -> list[ray.actor.ActorHandle]:
        """The shard actors, indexed by shard number."""
        return list(self._handles)

    @property
    def num_shards(self) -> int:
        return len(self._handles)

    def handle_for(self, video_id: int) -> ray.actor.ActorHandle:
        """The actor that holds (or will hold) a video's frames."""
        return self._handles[shard_for(video_id, len(self._handles))]

    def delete_video(self, video_id: int, commit: bool = False) -> int:
        """Remove a video from its shard; return the frames removed. With ``commit`` the
        removal is durable on return, else it waits for the shard's next commit."""
        handle = self.handle_for(video_id)
        removed = ray.get(handle.delete_video.remote(video_id))
        if commit:
            ray.get(handle.commit.remote())
        return removed

    def commit(self, shard_nos: Iterable[int] | None = None) -> None:
        """Snapshot the given shards (all when None) in parallel; return when all are durable."""
        nos = range(len(self._handles)) if shard_nos is None else list(shard_nos)
        for n in nos:
            if not 0 <= n < len(self._handles):
                raise ValueError(f"no shard {n}; there are {len(self._handles)}")
        ray.get([self._handles[n].commit.remote() for n in nos])

    def search(
        self, space: str, queries: np.ndarray, k: int, videos: Iterable[int] | None = None
    ) -> list[list[SearchHit]]:
        """Top-k frame hits per query across all shards, best first; with ``videos``, only
        those videos' frames (each shard is asked only about the videos it holds)."""
        queries = check_queries(space, queries, k)
        if not self._handles:
            raise RuntimeError("ShardSet is closed")
        handles: list[tuple[ray.actor.ActorHandle, list[int] | None]] = [(h, None) for h in self._handles]
        if videos is not None:
            per: dict[int, list[int]] = {}
            for v in videos:
                per.setdefault(shard_for(v, len(self._handles)), []).append(int(v))
            if not per:
                return [[] for _ in range(len(queries))]
            handles = [(self._handles[n], vs) for n, vs in per.items()]
        # Large query sets: one copy in the object store, read by every shard. Small ones
        # (a single text or image query) travel inline: a put costs more than they weigh.
        arg = ray.put(queries) if queries.nbytes > _INLINE_BYTES else queries
        per_shard = ray.get([h.search.remote(space, arg, k, vs) for h, vs in handles])
        return merge_topk(per_shard, k)

    def frames(self, space: str, video_id: int, start_s: float, end_s: float) -> tuple[np.ndarray, np.ndarray]:
        """A video's stored frame vectors in a time range: see ``Shard.frames``."""
        return ray.get(self.handle_for(video_id).frames.remote(space, video_id, start_s, end_s))

    def stats(self) -> list[dict]:
        """Each shard's ``Shard.stats()``, by shard number."""
        return ray.get([h.stats.remote() for h in self._handles])

    def close(self) -> None:
        """Kill the actors; anything not committed is lost."""
        for h in self._handles:
            ray.kill(h)
        self._handles = []
