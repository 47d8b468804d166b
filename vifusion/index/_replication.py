"""The primary's side of replication: one sender per follower, and the count of followers
that hold each write.

A write is acknowledged once it is durable on the primary and on ``need`` followers
(``cfg.shard_ack_replicas``); the others get it in the background. Each follower has one
sender thread, which sends it the writes in seq order and, where the follower answers with
a gap (it restarted from an older or empty directory, or two writes crossed), sends it what
it lacks from the primary's own state (``changes_after``) before going on. The sender, not
the follower, fills the gap: a follower that called the primary back from inside a forwarded
write would wait on a primary that serves one call at a time and is itself waiting for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import ray
from ray.actor import ActorHandle

from vifusion.cluster.actors import find_actor
from vifusion.index._loading import Changes
from vifusion.index._seal import Seal
from vifusion.index.wal import Op, encode

_INLINE_BYTES = 64 << 10  # past this, one put for every follower beats a copy in each call
_RETRY_S = 1.0  # a follower whose call failed (not one that died: Ray restarts it) is retried
log = logging.getLogger(__name__)

Source = Callable[[int, int | None], tuple[Changes, list[ray.ObjectRef], bytes]]


class Followers:
    """Sends every write to each follower, in order, and tells when enough hold it."""

    def __init__(
        self,
        shard_no: int,
        handles: dict[str, ActorHandle],
        held: dict[str, int],
        need: int,
        source: Source,
        seal: Seal,
    ) -> None:
        """``held``: the seq each follower answered with at the primary's start (missing: not
        known yet); ``source``: what a follower at a seq lacks, from the primary, sealed;
        ``seal``: what each write is sent with a MAC of."""
        self.need = need
        self._seal = seal
        self._shard_no = shard_no
        self._source = source
        self._cond = threading.Condition()
        self._senders = [
            _Sender(self, name, handle, held.get(name, -1)) for name, handle in handles.items()
        ]
        for s in self._senders:
            s.start()

    def send(self, seq: int, op: Op, nbytes: int) -> None:
        """Queue a durable write (``seq``) for every follower: its log payload and MAC."""
        payload = encode(op)
        tag = self._seal.record(seq, payload)
        arg = (ray.put(payload) if nbytes > _INLINE_BYTES else payload, tag)
        with self._cond:
            for s in self._senders:
                if not s.dead:
                    s.pending.append((seq, arg))
            self._cond.notify_all()

    def wait(self, seq: int) -> None:
        """Return once ``need`` followers hold every write through ``seq``. A follower being
        restarted is waited for (Ray brings it back and the sender catches it up); fewer
        live followers than ``need`` is an error: the write is on the primary alone."""
        with self._cond:
            while sum(s.held >= seq for s in self._senders) < self.need:
                live = sum(not s.dead for s in self._senders)
                if live < self.need:
                    raise RuntimeError(
                        f"shard {self._shard_no}: {live} live followers, fewer than "
                        f"shard_ack_replicas={self.need}: write {seq} is on the primary only"
                    )
                self._cond.wait()

    def held(self) -> dict[str, int]:
        """The seq each follower is known to hold (-1: not known yet)."""
        with self._cond:
            return {s.follower: s.held for s in self._senders}


class _Sender(threading.Thread):
    def __init__(self, owner: Followers, name: str, handle: ActorHandle, held: int) -> None:
        super().__init__(name=f"replicate-{name}", daemon=True)
        self.follower = name
        self.owner = owner
        self.handle = handle
        self.held = held
        self.dead = False
        self.pending: list[tuple[int, tuple[object, bytes]]] = []

    def run(self) -> None:
        cond = self.owner._cond
        while True:
            with cond:
                while not self.pending:
                    cond.wait()
                batch = sorted(self.pending, key=lambda p: p[0])
                self.pending.clear()
            try:
                self._send(batch)
            except ray.exceptions.RayActorError:  # gone for good: killed, say
                with cond:
                    self.dead = True
                    cond.notify_all()
                self._await_successor()
            except Exception:  # noqa: BLE001 - a failed call (its disk, say): try again later
                log.exception(
                    "shard %d: replicating to %s failed", self.owner._shard_no, self.follower
                )
                time.sleep(_RETRY_S)
                with cond:
                    self.pending.extend(batch)

    def _await_successor(self) -> None:
        """Wait for another actor under the follower's name (a ShardSet starts one where it
        finds none) and go on with it: it catches up from the primary as it starts, and
        counts for no write until it has."""
        gone = self.handle._actor_id
        while (h := find_actor(self.follower)) is None or h._actor_id == gone:
            time.sleep(_RETRY_S)
        with self.owner._cond:
            self.handle, self.held, self.dead = h, -1, False
        log.warning("shard %d: %s is back", self.owner._shard_no, self.follower)

    def _send(self, batch: list[tuple[int, tuple[object, bytes]]]) -> None:
        # Sent all at once: Ray runs one caller's calls to an actor in the order sent.
        refs = [
            (seq, self.handle.apply.remote(seq, payload, tag))
            for seq, (payload, tag) in batch
            if seq > self.held
        ]
        for seq, ref in refs:
            got = ray.get(ref)
            if got < seq and self.held < seq:  # a gap: send what it lacks, from the primary
                # not checked yet (-1): by what it holds, which may be another history
                at = ray.get(self.handle.position.remote()) if got < 0 else (got, None)
                got = ray.get(self.handle.install.remote(*self.owner._source(*at)))
            self._confirm(got)

    def _confirm(self, seq: int) -> None:
        with self.owner._cond:
            if seq > self.held:
                self.held = seq
                self.owner._cond.notify_all()
