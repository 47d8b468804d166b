"""What the node aggregator makes of its deliveries: the rows each video has in a batch, the
error a failed send gives its videos, and a link's view for ``stats``."""

from __future__ import annotations

from typing import Any

import numpy as np

from vifusion._files import StorageError, storage_reason
from vifusion.comm.transport import Delivery, Transport
from vifusion.fusion.policy import FlushPlan
from vifusion.types import video_of


def video_counts(ids: np.ndarray) -> tuple[list[int], list[int]]:
    """The videos among vector ``ids`` and how many rows each has. A batch is mostly one
    video's frames, which needs no sort (``np.unique`` was a tenth of the aggregator's time
    holding the GIL at 1 Gbit)."""
    videos = video_of(ids)
    if len(videos) and videos[0] == videos[-1] and (videos == videos[0]).all():
        return [int(videos[0])], [len(videos)]
    v, n = np.unique(videos, return_counts=True)
    return v.tolist(), n.tolist()


def send_failed(d: Delivery) -> Exception:
    """What ``finish`` raises for rows a shard did not take: a StorageError where the shard's
    disk refused them (the driver then waits for room instead of failing the video)."""
    message = f"sending to shard {d.dest} failed: {type(d.error).__name__}: {d.error}"
    reason = storage_reason(d.error)
    return StorageError(reason, message) if reason else RuntimeError(message)


def link_view(transport: Transport, dest: int, plan: FlushPlan) -> dict[str, Any]:
    """A link's statistics, its plan and its codec history, for ``stats``."""
    s = transport.stats(dest)
    level, codec = transport.codec(dest)
    return {
        "delivery_rate": s.delivery_rate,
        "capacity": s.capacity,
        "path_rate": s.path_rate,
        "min_rtt_s": s.min_rtt,
        "service_s": s.service_s,
        "per_message_s": s.per_message_s,
        "queueing_delay_s": s.queueing_delay,
        "backlog_age_s": s.backlog_age,
        "in_flight": s.in_flight,
        "receiver_share": s.receiver_share,
        "batch_bytes": plan.max_bytes,
        "window": plan.window,
        "level": level,
        "floor": transport.floor,
        "codec": codec,
        "by_stream": transport.by_stream(dest),
        "stream_failures": transport.stream_failures(dest),
        "history": transport.history(dest),
    }
