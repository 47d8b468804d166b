"""The extractor: a Ray actor that turns one video at a time into frame features.

decode -> embed -> hand to the node's aggregator, as a pipeline: decoding runs ahead in a
thread, and one hand-over is in flight while the next frames are embedded, so the
aggregator fuses and sends (``vifusion.fusion``) while this actor computes. The actor takes
a GPU where the cluster has one and runs on the CPU otherwise.
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray
from ray.actor import ActorHandle

from vifusion._files import storage_reason
from vifusion.config import Config
from vifusion.fusion import AggregatorLost, Handoff
from vifusion.placement import extractor_options
from vifusion.types import FusedBatch


class Extractor:
    """Indexes videos through its node's aggregator (``aggregators``: by node id). One video at a time."""

    def __init__(self, cfg: Config, aggregators: dict[str, ActorHandle]) -> None:
        import torch

        from vifusion.extract.model import Embedder, pick_device

        torch.set_num_threads(cfg.torch_threads or cfg.threads)  # Ray sets OMP_NUM_THREADS=1
        self.cfg = cfg
        self.aggregator = aggregators[ray.get_runtime_context().get_node_id()]
        self.handoff = Handoff(self.aggregator, local=cfg.fusion_local_handoff)
        with contextlib.redirect_stdout(io.StringIO()):  # the weights loader prints
            self.embedder = Embedder(cfg.conse_top_k, pick_device(), cfg.data_dir / "models")

    def device(self) -> str:
        return str(self.embedder.device)

    def index_video(
        self, video_id: int, path: str, shard_no: int, follow_symlinks: bool = True
    ) -> Iterator[dict[str, Any]]:
        """Streams events: ``probed`` (video info), ``progress`` (frames done / total),
        then ``done`` (frames indexed) or ``failed`` (reason). Every frame of a ``done``
        video has been acknowledged by its shard. ``follow_symlinks``: see ``open_regular``."""
        from vifusion.extract._prefetch import prefetch
        from vifusion.extract.decode import DecodeError, open_sampled

        name = Path(path).name
        try:
            info, total, batches = open_sampled(
                Path(path), self.cfg.sample_fps, self.cfg.max_frames, batch=self.cfg.embed_batch,
                follow_symlinks=follow_symlinks,
            )
            yield {"event": "probed", "duration_s": info.duration_s, "fps": info.fps,
                   "width": info.width, "height": info.height, "frames_total": total}
            done, handing, instance = 0, None, None
            self.handoff.reset()
            for frames, spans in prefetch(batches):
                visual, semantic = self.embedder.embed_frames(frames)
                batch = FusedBatch.of_video(video_id, done, [(t0, t1) for _, t0, t1 in spans], visual, semantic)
                done += len(batch)
                if handing is not None:
                    instance = _same(instance, handing.result())  # back-pressure reaches this actor here
                handing = self.handoff.submit(shard_no, batch, time.time())
                yield {"event": "progress", "frames_done": done, "frames_total": total}
            if handing is not None:
                instance = _same(instance, handing.result())
            _same(instance, ray.get(self.aggregator.finish.remote(video_id))[1])
            if done == 0:
                raise DecodeError(f"{name}: no frames could be decoded")
            yield {"event": "done", "frames": done}
        except DecodeError as e:
            self._abandon(video_id)
            yield {"event": "failed", "error": str(e)}
        except (AggregatorLost, ray.exceptions.RayActorError) as e:  # not the video's fault: worth a retry
            yield {"event": "failed", "error": f"{name}: {_reason(e)}", "retry": True}
        except Exception as e:  # a bug, a dead shard or a full disk fails this video, not the actor
            self._abandon(video_id)
            yield {"event": "failed", "error": f"{name}: {_reason(e)}", "storage": storage_reason(e)}

    def _abandon(self, video_id: int) -> None:
        """Drop a failed video's unsent frames and settle its sends; the driver then
        deletes whatever of it reached the shard."""
        self.handoff.settle()
        ray.get(self.aggregator.abandon.remote(video_id))


def _same(instance: str | None, now: str) -> str:
    if instance is not None and now != instance:
        raise AggregatorLost("the node aggregator restarted and lost rows it held")
    return now


def _reason(e: Exception) -> str:
    # A failure inside the aggregator arrives wrapped; its own message is the reason.
    if isinstance(e, ray.exceptions.RayTaskError) and e.cause is not None:
        e = e.cause
    return f"{type(e).__name__}: {e}"


def start_extractors(cfg: Config, aggregators: dict[str, ActorHandle]) -> list[ActorHandle]:
    """``cfg.num_extractors`` actors, on GPUs where the cluster has them (``placement.py``)."""
    # max_restarts: a dead extractor comes back (models reloaded); the indexer retries its video.
    cls = ray.remote(Extractor).options(**extractor_options(cfg.num_extractors), max_restarts=-1)
    return [cls.remote(cfg, aggregators) for _ in range(cfg.num_extractors)]
