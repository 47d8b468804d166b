"""One replica of one shard, as a Ray actor.

The primary (replica 0) owns the shard directory: it logs every write, applies it, and
forwards it with its log seq to the other replicas before acknowledging, so an acknowledged
write is durable and on every live replica. The others load snapshot + log on start (a
restart is that catch-up) and apply what the primary forwards, in seq order. The primary
also takes batches on its shard stream (``comm/stream.py``), every call under the replica's
lock; a stream batch is applied, then synced beside the next one (a group commit) and
acknowledged and forwarded only once synced: a search may see it a few ms before it is durable.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import ray
from ray.actor import ActorHandle

from vifusion._actors import NAMESPACE
from vifusion._corewait import CoreWait
from vifusion.comm.codec import Ladder
from vifusion.comm.message import WireBatch
from vifusion.comm.stream import Ack, StreamServer, TablesUnknown
from vifusion.config import Config
from vifusion.index.shard import Shard
from vifusion.index.wal import Delete, Op
from vifusion.types import FusedBatch

_INLINE_BYTES = 64 << 10  # past this, one put for every follower beats a copy in each call
log = logging.getLogger(__name__)


class ShardReplica:
    """A ``Shard`` behind a Ray actor; ``followers`` (the other replicas' actor names)
    given: this is the primary. Names, not handles: Ray cannot restart an actor whose
    constructor arguments include actor handles (they are kept in the object store)."""

    def __init__(
        self, shard_no: int, directory: Path, cfg: Config, followers: list[str] | None = None
    ) -> None:
        self.primary = followers is not None
        self.shard = Shard(shard_no, directory, cfg, writer=self.primary, background=True)
        self._names = list(followers or [])
        self._followers: list[ActorHandle] | None = None
        self._ladders: dict[str, Ladder] = {"": Ladder()}
        # Seconds spent serving calls of any kind, in all (one call at a time): a sender tells a
        # shard busy with its writes, or with searches, from a slow link.
        self._busy_s = 0.0
        self._lock = threading.RLock()
        self._core_wait = CoreWait()
        self._stream = _stream_server(self) if self.primary and cfg.fusion_stream else None

    # writes: the primary
    def receive(self, wire: WireBatch) -> Ack:
        """A batch off the wire, decoded and added. Returns the vectors held and, for the
        sender's link monitor: seconds spent applying it, its cost here (CPU seconds
        stretched by the wait for a core, ``_corewait.py``, plus its own log sync), and the
        seconds spent serving calls in all (the sync not counted: the sender sees it in the
        round trip, as on the shard stream where it runs beside the next batch)."""
        n, service, cost, busy = self._stage(wire)()
        return n, service, cost + self.shard.last_sync_s, busy

    def _stage(self, wire: WireBatch) -> Callable[[], Ack]:
        """``receive`` in two steps, so the shard stream reads and applies the next batch
        while this one syncs: this one decodes and applies the batch (its log record written,
        not synced; one call at a time), the function it returns makes it durable and
        forwards it to the followers (any thread, batches in order) and returns the ack."""
        before = self._busy_s
        with self._serving():
            cpu = time.thread_time()
            batch = wire.decode(self._ladder(wire))
            seq_before = self.shard.seq
            n, seq = self.shard.stage(batch)
            # It sizes the sender's batches (``link.py``). CPU time stretched by the recent
            # wait for a core: the wall time of one small batch is mostly other threads'
            # doing (the GIL, a core taken at random) and read 0.1-0.6 ms from run to run,
            # its CPU time alone the same 0.1 ms whether or not another process took a core.
            cpu = (time.thread_time() - cpu) * self._core_wait.stretch()
        service = self._busy_s - before
        logged = seq != seq_before

        def commit() -> Ack:
            self.shard.commit(seq)
            if logged:
                self._forward(seq, batch, batch.nbytes)
            # The sync is no cost of this batch: one serves every batch staged by then, so
            # the syncs per batch fall as batches come faster (a group commit amortises itself).
            return n, service, cpu, self._busy_s

        return commit

    def ping(self) -> Ack:
        """The sender's probe on an idle link."""
        return 0, 0.0, 0.0, self._busy_s

    def stream_address(self) -> tuple[tuple[str, int], bytes] | None:
        """Where senders write batches without an actor call, and the secret that lets them
        in (``comm/stream.py``); None: by ``receive`` only."""
        return (self._stream.address, self._stream.secret) if self._stream else None

    def add(self, batch: FusedBatch) -> int:
        with self._serving():
            before = self.shard.seq
            n = self.shard.add(batch)
            if self.shard.seq != before:
                self._forward(self.shard.seq, batch, batch.nbytes)
            return n

    def delete_video(self, video_id: int) -> int:
        with self._serving():
            before = self.shard.seq
            n = self.shard.delete_video(video_id)
            if self.shard.seq != before:
                self._forward(self.shard.seq, Delete(video_id), 0)
            return n

    def snapshot(self) -> None:
        with self._serving():
            self.shard.snapshot()

    # writes: the others
    def apply(self, seq: int, op: Op) -> None:
        with self._serving():
            self.shard.apply(seq, op)

    # reads: any replica
    def search(self, space: str, queries: np.ndarray, k: int, videos: list[int] | None = None):
        with self._serving():
            return self.shard.search(space, queries, k, videos)

    def frames(self, space: str, video_id: int, start_s: float, end_s: float):
        with self._serving():
            return self.shard.frames(space, video_id, start_s, end_s)

    def stats(self) -> dict:
        with self._lock:
            return {**self.shard.stats(), "primary": self.primary, "busy_s": self._busy_s}

    def video_ids(self) -> list[int]:
        with self._lock:
            return self.shard.video_ids()

    def wait_idle(self) -> None:
        with self._serving():
            self.shard.wait_idle()

    @contextmanager
    def _serving(self) -> Iterator[None]:
        with self._lock:
            t0 = time.perf_counter()
            try:
                yield
            finally:
                self._busy_s += time.perf_counter() - t0

    def _ladder(self, wire: WireBatch) -> Ladder:
        version = wire.payload.version
        if version not in self._ladders:
            if wire.tables is None:  # a stream batch: the sender sends it again with the tables
                raise TablesUnknown(
                    f"tables version {version} unknown here; send them with the batch"
                )
            self._ladders[version] = Ladder(ray.get(wire.tables))
        return self._ladders[version]

    def _forward(self, seq: int, op: Op, nbytes: int) -> None:
        """Send a durable write to the followers. Calls from two threads may cross (the
        stream's commit and an actor call): a follower fills a gap from the log, and skips
        what it holds (``Shard.apply``)."""
        if not self._names:
            return
        if self._followers is None:
            self._followers = [ray.get_actor(name, namespace=NAMESPACE) for name in self._names]
        arg = ray.put(op) if nbytes > _INLINE_BYTES else op
        # A follower that is down is restarted by Ray and the call retried once it is back.
        ray.get([f.apply.remote(seq, arg) for f in self._followers])


def _stream_server(replica: ShardReplica) -> StreamServer | None:
    try:
        return StreamServer(replica._stage, replica.ping, ray.util.get_node_ip_address())
    except OSError as e:  # no address to listen on: actor calls only
        log.warning("shard %d: no stream (%s); senders use actor calls", replica.shard.shard_no, e)
        return None
