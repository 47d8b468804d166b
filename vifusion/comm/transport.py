"""Transport: fused batches to shard actors over Ray, each link watched and its codec chosen.

A batch leaves encoded with its link's current codec (``adaptive.py`` picks it from the
link's statistics, ``link.py``), and counts as delivered only once the destination
acknowledged it: ``receive`` returned, which means it is in the shard's write-ahead log.
The acknowledgement carries the destination's service time and its running total of busy
time, so the monitor measures the network part of each round trip.

The transfer path is chosen by size (Poseidon): a message up to ``inline_bytes`` rides
inline in the actor call (one round trip); a larger one is put in the object store first,
which costs a few round trips more but keeps large payloads off the control path. The limit
is Ray's own (``inline_limit``): 1 MiB in a ViFusion Ray (``vifusion.runtime.RAY_TUNED``),
100 KiB in a Ray with defaults. Sends never wait here: the caller keeps each link's
in-flight count under its window (``in_flight``) and collects acknowledgements with
``poll``.

PQ and sparse codecs need tables every node knows: the sender puts its ``SharedTables`` in
the object store once and each message names them, so a shard fetches a version the first
time it meets it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Collection, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ray
from ray.actor import ActorHandle

from vifusion.comm.adaptive import CodecPolicy, Rung
from vifusion.comm.codec import Encoded, Ladder, SharedTables
from vifusion.comm.link import LinkMonitor, LinkStats
from vifusion.types import FusedBatch

_CALL_BYTES = 4 << 10  # what a call adds to its argument's bytes (names, pickling)


def inline_limit() -> int:
    """The largest message this process's Ray passes inline in an actor call. Ray reads its
    settings from its processes' environment, so this does too."""
    return int(os.environ.get("RAY_max_direct_call_object_size", 100 << 10)) - _CALL_BYTES


@dataclass
class WireBatch:
    """A fused batch as it crosses a link: ids and times as they are, features encoded."""

    ids: np.ndarray
    times: np.ndarray
    payload: Encoded
    batch_id: str
    tables: Any = None  # ObjectRef of the SharedTables the codec needs (pq, sparse)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes + self.times.nbytes + self.payload.nbytes

    def decode(self, ladder: Ladder) -> FusedBatch:
        return FusedBatch(self.ids, self.times, ladder.decode(self.payload), self.batch_id)


@dataclass(frozen=True)
class Delivery:
    """The outcome of one message: acknowledged (``error`` None) or failed."""

    dest: Hashable
    tag: Any
    rows: int
    wire_bytes: int
    codec: str
    error: Exception | None = None


@dataclass
class _Link:
    monitor: LinkMonitor
    policy: CodecPolicy
    in_flight: dict[ray.ObjectRef, tuple[int, Any, int, int, str]] = field(default_factory=dict)


class Transport:
    """Encodes, sends and tracks messages per destination. One thread may send while another
    collects acknowledgements (``poll``): a sender that waited in ``poll`` could not send the
    rows that came in meanwhile, and kept one message in flight whatever its window."""

    def __init__(self, tables: SharedTables | None = None, *, adaptive: bool = True, fixed: str | None = None,
                 allowed: Collection[str] | None = None, policy: dict[str, float] | None = None,
                 small_bytes: int = 64 << 10) -> None:
        """``adaptive``: each link's codec follows its congestion; otherwise exact fp32, or
        the ``fixed`` codec on every link (for comparisons). ``allowed``: the codecs the
        adaptive policy may pick (None: the whole ladder), e.g. those that keep recall.
        ``small_bytes``: the sender's smallest batch (``LinkMonitor``)."""
        self.adaptive = adaptive and fixed is None
        self.fixed = fixed
        self._policy_args = dict(policy or {})
        self._small_bytes = small_bytes
        self._links: dict[Hashable, _Link] = {}
        self._refs: dict[ray.ObjectRef, Hashable] = {}
        self._lock = threading.Condition()  # the links' state; notified when a message leaves
        self.inline_bytes = inline_limit()
        self.use_tables(tables, allowed)

    def use_tables(self, tables: SharedTables | None, allowed: Collection[str] | None = None) -> None:
        """Switch to a ladder with these tables (adds the sparse and pq rungs, where allowed)."""
        ladder = Ladder(tables)
        tables_ref = ray.put(tables) if tables is not None else None
        with self._lock:
            self.ladder, self._tables_ref = ladder, tables_ref
            self._codecs = [c for c in ladder.codecs if c.lossless or allowed is None or c.name in allowed]
            self._encode_s = [0.0] * len(self._codecs)
            rungs = [Rung(c.name, c.bytes_per_row) for c in self._codecs]
            for link in self._links.values():
                link.policy.rungs = rungs
                link.policy.level = min(link.policy.level, len(rungs) - 1)

    def send(self, dest: Hashable, handle: ActorHandle, batch: FusedBatch, *, backlog: bool, tag: Any = None) -> None:
        """Encode ``batch`` with the link's codec and send it to ``handle.receive``."""
        with self._lock:
            link = self._link(dest)
            level = link.policy.level
            codec, encode_s, tables_ref = self._codecs[level], self._encode_s, self._tables_ref
        t0 = time.perf_counter()
        payload = codec.encode(batch.features)
        if len(batch):
            cost = (time.perf_counter() - t0) / len(batch)
            encode_s[level] = cost if not encode_s[level] else 0.8 * encode_s[level] + 0.2 * cost
        wire = WireBatch(batch.ids, batch.times, payload, batch.batch_id, tables_ref if payload.version else None)
        t1 = time.perf_counter()
        arg = ray.put(wire) if wire.nbytes > self.inline_bytes else wire
        ref = handle.receive.remote(arg)
        submit_s = time.perf_counter() - t1
        with self._lock:
            token = link.monitor.on_send(wire.nbytes, batch.nbytes, backlog=backlog, submit_s=submit_s)
            self._track(dest, link, ref, (token, tag, len(batch), wire.nbytes, codec.name))

    def probe(self, dest: Hashable, handle: ActorHandle) -> None:
        """A tiny message on an idle link, to keep its min RTT current."""
        ref = handle.ping.remote()
        with self._lock:
            link = self._link(dest)
            self._track(dest, link, ref, (link.monitor.on_send(64, 0, backlog=False), None, 0, 64, "probe"))

    def poll(self, timeout: float) -> list[Delivery]:
        """Acknowledgements (and failures) that arrive within ``timeout`` seconds."""
        with self._lock:
            if not self._refs:
                self._lock.wait(timeout)  # until a message leaves
            refs = list(self._refs)
        if not refs:
            return []
        # The first acknowledgement ends the wait (the window has room again), then whatever
        # else is in: waiting for all of them would drain the window before it refills.
        first, _ = ray.wait(refs, num_returns=1, timeout=timeout, fetch_local=True)
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=True) if first else ([], None)
        acks: list[tuple[ray.ObjectRef, Any]] = []
        for ref in done:
            try:
                acks.append((ref, ray.get(ref)))
            except ray.exceptions.RayError as e:
                acks.append((ref, e))
        out = []
        with self._lock:
            for ref, ack in acks:
                dest = self._refs.pop(ref)
                link = self._links[dest]
                token, tag, rows, nbytes, codec = link.in_flight.pop(ref)
                if isinstance(ack, Exception):
                    link.monitor.on_lost(token)
                    out.append(Delivery(dest, tag, rows, nbytes, codec, ack))
                    continue
                _, service_s, fixed_s, busy_s = ack
                link.monitor.on_ack(token, service_s, fixed_s, busy_s)
                link.policy.update(link.monitor.stats(), self._encode_s)
                if codec != "probe":
                    out.append(Delivery(dest, tag, rows, nbytes, codec))
        return out

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

    def _track(self, dest: Hashable, link: _Link, ref: ray.ObjectRef, entry: tuple) -> None:
        """A message in flight (``self._lock`` held): ``poll`` waits for it from now on."""
        link.in_flight[ref] = entry
        self._refs[ref] = dest
        self._lock.notify_all()

    def _link(self, dest: Hashable) -> _Link:
        link = self._links.get(dest)
        if link is None:
            rungs = [Rung(c.name, c.bytes_per_row) for c in self._codecs]
            link = _Link(LinkMonitor(small_bytes=self._small_bytes), CodecPolicy(rungs, enabled=self.adaptive, **self._policy_args))
            if self.fixed is not None:
                link.policy.level = [c.name for c in self._codecs].index(self.fixed)
            self._links[dest] = link
        return link
