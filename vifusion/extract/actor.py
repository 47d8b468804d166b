"""The extractor: a Ray actor that turns one video at a time into fused feature batches.

decode -> embed -> fuse -> send, as a pipeline: sends are asynchronous (bounded window),
so the shards apply one batch while the next frames are decoded and embedded. The actor
takes a GPU where the cluster has one and runs on the CPU otherwise.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray
from ray.actor import ActorHandle

from vifusion.config import Config
from vifusion.types import FrameFeatures


class Extractor:
    """Indexes videos into the shards it is given. One video at a time."""

    def __init__(self, cfg: Config, shards: list[ActorHandle]) -> None:
        import torch

        from vifusion.comm import Transport
        from vifusion.extract.model import Embedder, pick_device
        from vifusion.fusion import Fuser

        torch.set_num_threads(cfg.torch_threads or cfg.threads)  # Ray sets OMP_NUM_THREADS=1
        self.cfg = cfg
        self.shards = shards
        with contextlib.redirect_stdout(io.StringIO()):  # the weights loader prints
            self.embedder = Embedder(cfg.conse_top_k, pick_device(), cfg.data_dir / "models")
        self.fuser = Fuser(cfg.fusion_max_bytes, cfg.fusion_max_age_s)
        self.transport = Transport(cfg.send_window)

    def device(self) -> str:
        return str(self.embedder.device)

    def index_video(self, video_id: int, path: str, shard_no: int) -> Iterator[dict[str, Any]]:
        """Streams events: ``probed`` (video info), ``progress`` (frames done / total),
        then ``done`` (frames indexed) or ``failed`` (reason). Every frame of a ``done``
        video has been acknowledged by its shard."""
        from vifusion.extract._prefetch import prefetch
        from vifusion.extract.decode import DecodeError, open_sampled

        name = Path(path).name
        try:
            info, total, batches = open_sampled(
                Path(path), self.cfg.sample_fps, self.cfg.max_frames, batch=self.cfg.embed_batch
            )
            yield {"event": "probed", "duration_s": info.duration_s, "fps": info.fps,
                   "width": info.width, "height": info.height, "frames_total": total}
            done = 0
            for frames, spans in prefetch(batches):
                visual, semantic = self.embedder.embed_frames(frames)
                feats = [
                    FrameFeatures(video_id, done + i, t0, t1, visual[i], semantic[i])
                    for i, (_, t0, t1) in enumerate(spans)
                ]
                done += len(feats)
                for dest, batch in self.fuser.add(shard_no, feats):
                    self.transport.send(dest, self.shards[dest], batch)
                yield {"event": "progress", "frames_done": done, "frames_total": total}
            last = self.fuser.flush(shard_no)
            if last is not None:
                self.transport.send(shard_no, self.shards[shard_no], last)
            self.transport.drain(shard_no)
            if done == 0:
                raise DecodeError(f"{name}: no frames could be decoded")
            yield {"event": "done", "frames": done}
        except DecodeError as e:
            self._abandon(shard_no)
            yield {"event": "failed", "error": str(e)}
        except Exception as e:  # a bug or a dead shard fails this video, not the actor
            self._abandon(shard_no)
            yield {"event": "failed", "error": f"{name}: {type(e).__name__}: {e}"}

    def _abandon(self, shard_no: int) -> None:
        """Drop a failed video's unsent frames and settle its sends; the driver then
        deletes whatever of it reached the shard."""
        self.fuser.flush(shard_no)
        self.transport.abandon(shard_no)

    def stats(self) -> dict[str, int]:
        s = self.transport.stats
        return {"batches": s.batches, "frames": s.frames, "bytes": s.bytes}


def start_extractors(cfg: Config, shards: list[ActorHandle]) -> list[ActorHandle]:
    """``cfg.num_extractors`` actors, each with a GPU if the cluster has enough of them."""
    gpus = ray.cluster_resources().get("GPU", 0)
    num_gpus = 1 if gpus >= cfg.num_extractors else 0
    cls = ray.remote(Extractor).options(num_cpus=1, num_gpus=num_gpus)
    return [cls.remote(cfg, shards) for _ in range(cfg.num_extractors)]
