"""Transport: fused batches to shard replicas, each link watched and its codec chosen.

A batch leaves in its link's current codec (``adaptive.py``) and is delivered once the
destination acknowledged it (it is in the shard's write-ahead log); the acknowledgement's
service and busy times feed the link monitor (``link.py``). The path: the shard stream
(``stream.py``) where it is open; else, and for a batch the stream could not deliver, an
actor call, inline up to ``inline_bytes`` (Ray's ``inline_limit``), larger through the
object store. Sends never wait: the caller keeps each link under its window
(``in_flight``) and collects acknowledgements with ``poll``.

Table codecs (PQ, sparse) name ``SharedTables`` put once in the object store; a stream
batch of tables the shard lacks comes back (``TablesUnknown``) and goes by actor call. A
batch holding a text row goes in int8 (the tables are trained on frames). Why:
docs/benchmarks.md, "Design notes moved from docstrings".
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Collection, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

import ray
from ray.actor import ActorHandle

from vifusion.comm.adaptive import CodecPolicy, Rung
from vifusion.comm.codec import Ladder, SharedTables
from vifusion.comm.link import LinkMonitor, LinkStats
from vifusion.comm.message import WireBatch
from vifusion.comm.stream import ShardStream, StreamLost, TablesUnknown
from vifusion.types import FRAME, FusedBatch, kind_of

log = logging.getLogger(__name__)

_CALL_BYTES = 4 << 10  # what a call adds to its argument's bytes (names, pickling)
_STREAM_RETRY_S = 2.0  # after the stream failed: actor calls, then ask the replica again
_STREAM_RETRY_MAX_S = 300.0  # doubling while it keeps failing (a firewall between the nodes, say)


def inline_limit() -> int:
    """The largest message this process's Ray passes inline in an actor call. Ray reads its
    settings from its processes' environment, so this does too."""
    return int(os.environ.get("RAY_max_direct_call_object_size", 100 << 10)) - _CALL_BYTES


@dataclass(frozen=True)
class Delivery:
    """The outcome of one message: acknowledged (``error`` None) or failed."""

    dest: Hashable
    tag: Any
    rows: int
    wire_bytes: int
    codec: str
    error: Exception | None = None
    by_stream: bool = False  # it went on the shard stream, not by actor call


@dataclass
class _Sent:
    """A message in flight: what its acknowledgement settles, and what a resend needs."""

    token: int
    tag: Any
    rows: int
    wire_bytes: int
    codec: str
    handle: ActorHandle
    wire: WireBatch | None  # None: a probe
    by_stream: bool


@dataclass
class _Link:
    monitor: LinkMonitor
    policy: CodecPolicy
    in_flight: dict[Future, _Sent] = field(default_factory=dict)
    stream: ShardStream | None = None
    address: ray.ObjectRef | None = None  # the replica's answer to ``stream_address``, awaited
    stream_after: float = 0.0  # no stream before this (monotonic)
    stream_failures: list[str] = field(default_factory=list)  # why it closed, the last few
    failed_in_a_row: int = 0  # streams that closed with no batch acknowledged on them


class Transport:
    """Encodes, sends and tracks messages per destination. One thread may send while another
    collects acknowledgements (``poll``): a sender that waited in ``poll`` could not send the
    rows that came in meanwhile, and kept one message in flight whatever its window."""

    def __init__(
        self,
        tables: SharedTables | None = None,
        *,
        adaptive: bool = True,
        fixed: str | None = None,
        allowed: Collection[str] | None = None,
        policy: dict[str, float] | None = None,
        min_bytes: int = 64 << 10,
        stream: bool = True,
    ) -> None:
        """``adaptive``: each link's codec follows its congestion; otherwise exact fp32, or
        the ``fixed`` codec on every link (for comparisons). ``allowed``: the codecs the
        adaptive policy may pick (None: the whole ladder), e.g. those that keep recall.
        ``min_bytes``: the sender's smallest batch (``LinkMonitor``). ``stream``: send
        over the shard stream where the replica has one (False: actor calls only)."""
        self.adaptive = adaptive and fixed is None
        self.fixed = fixed
        self._policy_args = dict(policy or {})
        self._min_bytes = min_bytes
        self._use_streams = stream
        self._links: dict[Hashable, _Link] = {}
        self._futures: dict[Future, Hashable] = {}
        # Settled futures, in the order they settled: ``poll`` waits here (a wait on all the
        # futures in flight built and tore down a waiter on each at every call).
        self._done: queue.SimpleQueue[Future] = queue.SimpleQueue()
        self._lock = threading.RLock()  # the links' state
        self.inline_bytes = inline_limit()
        self.use_tables(tables, allowed)

    def use_tables(
        self, tables: SharedTables | None, allowed: Collection[str] | None = None
    ) -> None:
        """Switch to a ladder with these tables (adds the sparse and pq rungs, where allowed)."""
        ladder = Ladder(tables)
        tables_ref = ray.put(tables) if tables is not None else None
        with self._lock:
            self.ladder, self._tables_ref = ladder, tables_ref
            self._codecs = [
                c for c in ladder.codecs if c.lossless or allowed is None or c.name in allowed
            ]
            self._encode_s = [0.0] * len(self._codecs)
            rungs = [Rung(c.name, c.bytes_per_row) for c in self._codecs]
            for link in self._links.values():
                link.policy.rungs = rungs
                link.policy.level = min(link.policy.level, len(rungs) - 1)

    def send(
        self,
        dest: Hashable,
        handle: ActorHandle,
        batch: FusedBatch,
        *,
        backlog: bool,
        tag: Any = None,
    ) -> None:
        """Encode ``batch`` with the link's codec and send it to ``handle.receive``."""
        with self._lock:
            link = self._link(dest)
            level = link.policy.level
            if self._codecs[level].version and (kind_of(batch.ids) != FRAME).any():
                level = max(i for i, c in enumerate(self._codecs[:level]) if not c.version)
            codec, encode_s, tables_ref = self._codecs[level], self._encode_s, self._tables_ref
            stream = self._stream(link, handle)
        t0 = time.perf_counter()
        payload = codec.encode(batch.features)
        if len(batch):
            cost = (time.perf_counter() - t0) / len(batch)
            encode_s[level] = cost if not encode_s[level] else 0.8 * encode_s[level] + 0.2 * cost
        wire = WireBatch(
            batch.ids, batch.times, payload, batch.batch_id, tables_ref if payload.version else None
        )
        t1 = time.perf_counter()
        future = stream.send(wire) if stream else self._call(handle, wire)
        submit_s = time.perf_counter() - t1
        with self._lock:
            token = link.monitor.on_send(
                wire.nbytes, batch.nbytes, backlog=backlog, submit_s=submit_s
            )
            self._track(
                dest,
                link,
                future,
                _Sent(
                    token,
                    tag,
                    len(batch),
                    wire.nbytes,
                    codec.name,
                    handle,
                    wire,
                    stream is not None,
                ),
            )

    def probe(self, dest: Hashable, handle: ActorHandle) -> None:
        """A tiny message on an idle link, to keep its min RTT current."""
        with self._lock:
            link = self._link(dest)
            stream = self._stream(link, handle)
            future = stream.ping() if stream else handle.ping.remote().future()
            token = link.monitor.on_send(64, 0, backlog=False)
            self._track(
                dest,
                link,
                future,
                _Sent(token, None, 0, 64, "probe", handle, None, stream is not None),
            )

    def poll(self, timeout: float) -> list[Delivery]:
        """Acknowledgements (and failures) that arrive within ``timeout`` seconds."""
        # The first acknowledgement ends the wait (the window has room again), then whatever
        # else is in: waiting for all of them would drain the window before it refills.
        try:
            done = [self._done.get(timeout=timeout)]
        except queue.Empty:
            return []
        while True:
            try:
                done.append(self._done.get_nowait())
            except queue.Empty:
                break
        acks = [(f, f.exception() or f.result()) for f in done]
        out = []
        with self._lock:
            for future, ack in acks:
                dest = self._futures.pop(future)
                link = self._links[dest]
                sent = link.in_flight.pop(future)
                if isinstance(ack, Exception):
                    link.monitor.on_lost(sent.token)
                    if sent.by_stream and isinstance(ack, StreamLost | TablesUnknown):
                        self._resend(dest, link, sent, ack)
                    elif sent.wire is not None:
                        out.append(
                            Delivery(dest, sent.tag, sent.rows, sent.wire_bytes, sent.codec, ack)
                        )
                    continue
                _, service_s, fixed_s, busy_s = ack
                link.monitor.on_ack(sent.token, service_s, fixed_s, busy_s)
                link.policy.update(link.monitor.stats(), self._encode_s)
                if sent.by_stream:
                    link.failed_in_a_row = 0
                if sent.wire is not None:
                    out.append(
                        Delivery(
                            dest,
                            sent.tag,
                            sent.rows,
                            sent.wire_bytes,
                            sent.codec,
                            by_stream=sent.by_stream,
                        )
                    )
        return out

    def by_stream(self, dest: Hashable) -> bool:
        """Whether this link's batches travel on the shard stream (after its first send)."""
        with self._lock:
            link = self._links.get(dest)
            return bool(link and link.stream and not link.stream.closed)

    def stream_failures(self, dest: Hashable) -> list[str]:
        """Why this link's stream closed, the last few times (its batches went by actor call)."""
        with self._lock:
            link = self._links.get(dest)
            return list(link.stream_failures) if link else []

    def close(self) -> None:
        with self._lock:
            for link in self._links.values():
                if link.stream:
                    link.stream.close()

    def in_flight(self, dest: Hashable) -> int:
        with self._lock:
            link = self._links.get(dest)
            return len(link.in_flight) if link else 0

    def set_backlog_age(self, dest: Hashable, age_s: float) -> None:
        with self._lock:
            self._link(dest).monitor.set_backlog_age(age_s)

    def due_probe(self, dest: Hashable) -> bool:
        with self._lock:
            return self._link(dest).monitor.due_probe()

    def stats(self, dest: Hashable) -> LinkStats:
        with self._lock:
            return self._link(dest).monitor.stats()

    @property
    def floor(self) -> int:
        """The least ladder level its links use: a plan's codec floor (0: none)."""
        return int(self._policy_args.get("floor", 0))

    def codec(self, dest: Hashable) -> tuple[int, str]:
        """The ladder level and name of the codec this link uses now."""
        with self._lock:
            codec = self._codecs[self._link(dest).policy.level]
            return codec.level, codec.name

    def wire_ratio(self, dest: Hashable) -> float:
        with self._lock:
            level = self._link(dest).policy.level
            return self._codecs[level].bytes_per_row / self._codecs[0].bytes_per_row

    def history(self, dest: Hashable) -> list[tuple[float, str]]:
        """When the link's codec changed, and to which."""
        with self._lock:
            return [(t, self._codecs[level].name) for t, level in self._link(dest).policy.history]

    def _track(self, dest: Hashable, link: _Link, future: Future, sent: _Sent) -> None:
        """A message in flight (``self._lock`` held): ``poll`` waits for it from now on."""
        link.in_flight[future] = sent
        self._futures[future] = dest
        future.add_done_callback(self._done.put)

    def _call(self, handle: ActorHandle, wire: WireBatch) -> Future:
        arg = ray.put(wire) if wire.nbytes > self.inline_bytes else wire
        return handle.receive.remote(arg).future()

    def _resend(self, dest: Hashable, link: _Link, sent: _Sent, why: Exception) -> None:
        """What the stream could not deliver goes again by actor call (``self._lock`` held)."""
        if isinstance(why, StreamLost) and link.stream is not None and link.stream.closed:
            log.warning("shard stream to %s: %s; actor calls for now", dest, why)
            wait_s = min(_STREAM_RETRY_S * 2**link.failed_in_a_row, _STREAM_RETRY_MAX_S)
            link.stream, link.stream_after = None, time.monotonic() + wait_s
            link.failed_in_a_row += 1
            link.stream_failures = [*link.stream_failures[-4:], str(why)]
        if sent.wire is None:  # a probe: the next one goes its own way
            return
        future = self._call(sent.handle, sent.wire)
        token = link.monitor.on_send(sent.wire_bytes, backlog=True)
        self._track(dest, link, future, replace(sent, token=token, by_stream=False))

    def _stream(self, link: _Link, handle: ActorHandle) -> ShardStream | None:
        """The link's stream to ``handle``'s replica, or None: an actor call (``self._lock``
        held). The replica's address is asked once and awaited without blocking the sender."""
        if link.stream is not None or not self._use_streams or time.monotonic() < link.stream_after:
            return link.stream
        if link.address is None:
            link.address = handle.stream_address.remote()
        ready, _ = ray.wait([link.address], timeout=0)
        if not ready:
            return None
        try:
            address = ray.get(link.address)
        except ray.exceptions.RayError as e:  # the replica is down: Ray retries the actor calls
            address = None
            log.info("shard stream: no address (%s)", e)
        link.address = None
        if address is None:
            link.stream_after = time.monotonic() + _STREAM_RETRY_S
            return None
        link.stream = ShardStream(*address)
        return link.stream

    def _link(self, dest: Hashable) -> _Link:
        link = self._links.get(dest)
        if link is None:
            rungs = [Rung(c.name, c.bytes_per_row) for c in self._codecs]
            link = _Link(
                LinkMonitor(min_bytes=self._min_bytes),
                CodecPolicy(rungs, enabled=self.adaptive, **self._policy_args),
            )
            if self.fixed is not None:
                link.policy.level = [c.name for c in self._codecs].index(self.fixed)
            self._links[dest] = link
        return link
