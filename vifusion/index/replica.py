"""One replica of one shard, as a Ray actor.

Every replica has its own directory (``layout.replica_dir``; on a cluster, its node's own
disk) and gets its data over Ray, never from another's files. The primary (replica 0) logs
every write, applies it, and acknowledges it once it is durable there and on
``cfg.shard_ack_replicas`` followers (``_replication.py``; the others get it in the
background). A follower logs (synced) and applies each forwarded write at the primary's seq.

Catching up: a follower starting loads its own directory, then asks the primary for what it
lacks (``changes_after``: log records, or the snapshot file and the log after it). A primary
starting asks its followers for their seqs first and, where one is ahead of it (the primary
came back on another node, with an empty or older directory), takes that follower's state
before it serves a call: Ray holds the writes sent meanwhile and runs them after. It waits
for enough followers that one of them holds every acknowledged write (all but
``shard_ack_replicas - 1`` of them): what moves on a primary's loss is its state, not its role.

The primary also takes batches on its shard stream (``comm/stream.py``), every call under the
replica's lock; a stream batch is applied, then synced beside the next one (a group commit)
and replicated and acknowledged only once synced: a search may see it a few ms before.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import ray
from ray.actor import ActorHandle

from vifusion.cluster.actors import NAMESPACE
from vifusion.comm.codec import Ladder
from vifusion.comm.message import WireBatch
from vifusion.comm.stream import Ack, StreamServer, TablesUnknown
from vifusion.config import Config
from vifusion.index._corewait import CoreWait
from vifusion.index._loading import Changes
from vifusion.index._replication import Followers
from vifusion.index._seal import Seal
from vifusion.index.shard import Shard
from vifusion.index.wal import Delete, Op, decode
from vifusion.types import FusedBatch

_FIND_S = 0.2  # how often a replica looks again for a peer not started yet
log = logging.getLogger(__name__)


class CatchingUp(RuntimeError):
    """A follower that has not caught up with the primary since it started."""


class ShardReplica:
    """A ``Shard`` behind a Ray actor; ``followers`` (the other replicas' actor names)
    given: this is the primary; ``primary`` (its actor name) given: a follower that catches
    up from it. Names, not handles: Ray cannot restart an actor whose constructor arguments
    include actor handles (they are kept in the object store)."""

    def __init__(
        self,
        shard_no: int,
        directory: Path,
        cfg: Config,
        followers: list[str] | None = None,
        primary: str | None = None,
        key: bytes | None = None,
    ) -> None:
        """``key``: the data dir's replication key (``_seal``), which seals what replicas
        send each other; needed where there are other replicas."""
        if key is None and (followers or primary is not None):
            raise ValueError("a replicated shard needs the data dir's replication key")
        self.primary = followers is not None
        self._seal = Seal(key) if key is not None else None
        self.shard = Shard(shard_no, directory, cfg, background=True)
        self._ladders: dict[str, Ladder] = {"": Ladder()}
        # Seconds spent serving calls of any kind, in all (one call at a time): a sender tells a
        # shard busy with its writes, or with searches, from a slow link.
        self._busy_s = 0.0
        self._lock = threading.RLock()
        self._core_wait = CoreWait()
        self._followers: Followers | None = None
        # A follower counts as holding a write only once the primary has checked what it
        # holds (its first ``install``): a directory from an older history may hold seqs the
        # primary never wrote, and would otherwise answer "held" for writes it skipped.
        self._checked = primary is None
        if followers:
            self._followers = self._lead(followers, cfg.ack_replicas)
        elif primary is not None:
            threading.Thread(target=self._pull, args=(primary,), daemon=True).start()
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
            self._writes_here()
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
            self._replicate(seq, batch if logged else None, batch.nbytes)
            # The sync is no cost of this batch: one serves every batch staged by then, so
            # the syncs per batch fall as batches come faster (a group commit amortises itself).
            return n, service, cpu, self._busy_s

        return commit

    def node_id(self) -> str:
        """The Ray node this replica runs on."""
        return ray.get_runtime_context().get_node_id()

    def ping(self) -> Ack:
        """The sender's probe on an idle link."""
        return 0, 0.0, 0.0, self._busy_s

    def stream_address(self) -> tuple[tuple[str, int], bytes] | None:
        """Where senders write batches without an actor call, and the secret that lets them
        in (``comm/stream.py``); None: by ``receive`` only."""
        return (self._stream.address, self._stream.secret) if self._stream else None

    def add(self, batch: FusedBatch) -> int:
        return self._write(lambda: self.shard.add(batch), batch, batch.nbytes)

    def delete_video(self, video_id: int) -> int:
        return self._write(lambda: self.shard.delete_video(video_id), Delete(video_id), 0)

    def _write(self, apply: Callable[[], int], op: Op, nbytes: int) -> int:
        """``apply`` ``op`` here (the primary), then replicate it: sent to the followers only
        where it took a seq here (an earlier copy of it did not), waited for either way."""
        with self._serving():
            self._writes_here()
            before = self.shard.seq
            n = apply()
            seq = self.shard.seq
            self._replicate(seq, op if seq != before else None, nbytes)
            return n

    def snapshot(self) -> None:
        with self._serving():
            self.shard.snapshot()

    # writes: the others
    def apply(self, seq: int, payload: bytes, tag: bytes) -> int:
        """Log and apply the primary's write ``seq`` (``payload``: the operation as its log
        record holds it, ``tag`` its MAC: ``Tampered`` where they do not match); return the
        seq held (below ``seq``: a gap, which the primary's sender fills with ``install``;
        -1: not yet checked against the primary, which it then does the same way)."""
        self._sealed().check_record(seq, payload, tag)
        with self._serving():
            return self.shard.apply(seq, decode(payload)) if self._checked else -1

    # catching up: any replica
    def position(self) -> tuple[int, int | None]:
        """The last write held (durable here: a follower syncs each before answering) and
        its record's checksum (``Shard.position``)."""
        return self.shard.position()

    def changes_after(
        self, after: int, crc: int | None = None, everything: bool = False
    ) -> tuple[Changes, list[ray.ObjectRef], bytes]:
        """What a replica at seq ``after`` lacks of this one (``Shard.changes_after``), and
        its MAC; the snapshot file, where it is needed, goes through the object store as one
        ref."""
        changes = self.shard.changes_after(after, crc, everything)
        tag = self._sealed().changes(changes)
        refs = [] if changes.snapshot is None else [ray.put(changes.snapshot)]
        return dataclasses.replace(changes, snapshot=None), refs, tag

    def install(self, changes: Changes, snapshot: list[ray.ObjectRef], tag: bytes) -> int:
        """Take what another replica sent (``changes_after``), durably, once its MAC matches
        (``Tampered`` where not: nothing installed); return the seq held."""
        if snapshot:
            changes = dataclasses.replace(changes, snapshot=ray.get(snapshot[0]))
        self._sealed().check_changes(changes, tag)
        with self._serving():
            held = self.shard.install(changes)
            self._checked = True
            return held

    # reads: any replica
    def search(self, space: str, queries: np.ndarray, k: int, videos: list[int] | None = None):
        """Top-k of one space (``Shard.search``). A follower not yet checked against the
        primary since it started (it may have come back empty) refuses: ask another."""
        if not self._checked:
            raise CatchingUp(f"shard {self.shard.shard_no}: this replica is catching up")
        with self._serving():
            return self.shard.search(space, queries, k, videos)

    def frames(
        self, space: str, video_id: int, start_s: float, end_s: float, limit: int | None = None
    ):
        with self._serving():
            return self.shard.frames(space, video_id, start_s, end_s, limit)

    def stats(self) -> dict:
        """The shard's stats, with this replica's role and directory, the seconds it has
        served calls, and on the primary the seq each follower is known to hold (-1: not
        known yet): how far behind each is."""
        with self._lock:
            return {
                **self.shard.stats(),
                "primary": self.primary,
                "directory": str(self.shard.directory),
                "followers": self._followers.held() if self._followers is not None else {},
                "busy_s": self._busy_s,
            }

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

    def _writes_here(self) -> None:
        if not self.primary:
            raise RuntimeError(
                f"shard {self.shard.shard_no}: this replica follows; writes go to the primary"
            )

    def _replicate(self, seq: int, op: Op | None, nbytes: int) -> None:
        """Send a durable write (``op``; None: nothing new, an earlier copy of it) to the
        followers and return once enough hold every write through ``seq``. Calls from two
        threads may cross (the stream's commit and an actor call): a sender sends in seq
        order and fills a gap, and a follower skips what it holds."""
        if self._followers is None:
            return
        if op is not None:
            self._followers.send(seq, op, nbytes)
        self._followers.wait(seq)

    def _lead(self, names: list[str], need: int) -> Followers:
        """Start as the primary: find the followers, and first take the state of the one
        furthest ahead, where it is ahead of this replica (this one lost its directory) or
        holds another history (a record at a seq both hold differs: this directory is an
        older one, from before another took over). It waits for enough of them that one
        holds every acknowledged write: a write was acknowledged once on ``need`` followers,
        so all but ``need - 1`` of them."""
        handles = {name: _find(name) for name in names}
        asks = {h.position.remote(): name for name, h in handles.items()}
        quorum = len(names) - max(need, 1) + 1
        done, _ = ray.wait(list(asks), num_returns=quorum)
        answers = {asks[ref]: ray.get(ref) for ref in done}
        held = {name: seq for name, (seq, _) in answers.items()}
        best = max(held, key=held.__getitem__)
        seq, crc = self.shard.position()
        other = any(
            c is not None and self.shard.crc_at(s) not in (None, c)
            for s, c in answers.values()
            if s <= seq
        )
        if held[best] > seq or other:
            log.warning(
                "shard %d: primary at seq %d%s, %s at %d: taking its state",
                self.shard.shard_no,
                seq,
                " (another history)" if other else "",
                best,
                held[best],
            )
            got = handles[best].changes_after.remote(seq, crc, everything=other)
            self.install(*ray.get(got))
        return Followers(
            self.shard.shard_no, handles, held, need, self.changes_after, self._sealed()
        )

    def _pull(self, primary: str) -> None:
        """A follower starting: get what it lacks from the primary (in the background, so
        that the primary, which may be asking this replica for its seq, is not waited on)."""
        handle = _find(primary)
        while True:
            try:
                self.install(*ray.get(handle.changes_after.remote(*self.shard.position())))
                return
            except ray.exceptions.RayActorError:  # the primary is gone for good
                return
            except Exception:  # noqa: BLE001 - a failed call: try again
                log.exception("shard %d: catching up from %s failed", self.shard.shard_no, primary)
                time.sleep(_FIND_S)

    def _sealed(self) -> Seal:
        if self._seal is None:
            raise RuntimeError(f"shard {self.shard.shard_no}: a lone replica replicates nothing")
        return self._seal


def _find(name: str) -> ActorHandle:
    """The replica of that name, once it is started (the ShardSet starts them in turn)."""
    while True:
        try:
            return ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            time.sleep(_FIND_S)


def _stream_server(replica: ShardReplica) -> StreamServer | None:
    try:
        return StreamServer(replica._stage, replica.ping, ray.util.get_node_ip_address())
    except OSError as e:  # no address to listen on: actor calls only
        log.warning("shard %d: no stream (%s); senders use actor calls", replica.shard.shard_no, e)
        return None
