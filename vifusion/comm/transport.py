"""Transport: fused batches to shard actors over Ray, each link watched and its codec chosen.

A batch leaves encoded with its link's current codec (``adaptive.py`` picks it from the
link's statistics, ``link.py``), and counts as delivered only once the destination
acknowledged it: ``receive`` returned, which means it is in the shard's write-ahead log.
The acknowledgement carries the destination's service time and its running total of busy
time, so the monitor measures the network part of each round trip.

The transfer path is chosen by size (Poseidon): a message up to ``INLINE_BYTES`` rides inline
in the actor call (one round trip); a larger one is put in the object store first, which
costs a few round trips more but keeps large payloads off the control path. Ray would pass
messages up to 1 MiB inline in a ViFusion Ray (``vifusion.runtime.RAY_TUNED``, for
hand-overs on a node), but across a 1 Gbit link 1 MiB messages inline carried less, and
less steadily, than 3-4 MiB through the object store (``benchmarks/fusion.py``: 6.7-10.3k
features/s against 9.4-12.5k, at a p50 of 25-32 ms against 70-150 ms). Sends never
wait here: the caller keeps each link's in-flight count under its window (``in_flight``)
and collects acknowledgements with ``poll``.

PQ and sparse codecs need tables every node knows: the sender puts its ``SharedTables`` in
the object store once and each message names them, so a shard fetches a version the first
time it meets it.
"""

from __future__ import annotations

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

INLINE_BYTES = 96 << 10  # as under Ray's default limit (100 KiB), with room for the call's bytes


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
    """Encodes, sends and tracks messages per destination. One thread uses it."""

    def __init__(self, tables: SharedTables | None = None, *, adaptive: bool = True, fixed: str | None = None,
                 allowed: Collection[str] | None = None, policy: dict[str, float] | None = None) -> None:
        """``adaptive``: each link's codec follows its congestion; otherwise exact fp32, or
        the ``fixed`` codec on every link (for comparisons). ``allowed``: the codecs the
        adaptive policy may pick (None: the whole ladder), e.g. those that keep recall."""
        self.adaptive = adaptive and fixed is None
        self.fixed = fixed
        self._policy_args = dict(policy or {})
        self._links: dict[Hashable, _Link] = {}
        self._refs: dict[ray.ObjectRef, Hashable] = {}
        self.use_tables(tables, allowed)

    def use_tables(self, tables: SharedTables | None, allowed: Collection[str] | None = None) -> None:
        """Switch to a ladder with these tables (adds the sparse and pq rungs, where allowed)."""
        self.ladder = Ladder(tables)
        self._tables_ref = ray.put(tables) if tables is not None else None
        self._codecs = [c for c in self.ladder.codecs if c.lossless or allowed is None or c.name in allowed]
        self._encode_s = [0.0] * len(self._codecs)
        rungs = [Rung(c.name, c.bytes_per_row) for c in self._codecs]
        for link in self._links.values():
            link.policy.rungs = rungs
            link.policy.level = min(link.policy.level, len(rungs) - 1)

    def send(self, dest: Hashable, handle: ActorHandle, batch: FusedBatch, *, backlog: bool, tag: Any = None) -> None:
        """Encode ``batch`` with the link's codec and send it to ``handle.receive``."""
        link = self._link(dest)
        codec = self._codecs[link.policy.level]
        t0 = time.perf_counter()
        payload = codec.encode(batch.features)
        if len(batch):
            cost = (time.perf_counter() - t0) / len(batch)
            prev = self._encode_s[link.policy.level]
            self._encode_s[link.policy.level] = cost if not prev else 0.8 * prev + 0.2 * cost
        wire = WireBatch(batch.ids, batch.times, payload, batch.batch_id,
                         self._tables_ref if payload.version else None)
        t1 = time.perf_counter()
        arg = ray.put(wire) if wire.nbytes > INLINE_BYTES else wire
        ref = handle.receive.remote(arg)
        token = link.monitor.on_send(wire.nbytes, batch.nbytes, backlog=backlog, submit_s=time.perf_counter() - t1)
        link.in_flight[ref] = (token, tag, len(batch), wire.nbytes, codec.name)
        self._refs[ref] = dest

    def probe(self, dest: Hashable, handle: ActorHandle) -> None:
        """A tiny message on an idle link, to keep its min RTT current."""
        link = self._link(dest)
        ref = handle.ping.remote()
        link.in_flight[ref] = (link.monitor.on_send(64, 0, backlog=False), None, 0, 64, "probe")
        self._refs[ref] = dest

    def poll(self, timeout: float) -> list[Delivery]:
        """Acknowledgements (and failures) that arrive within ``timeout`` seconds."""
        if not self._refs:
            return []
        # The first acknowledgement ends the wait (the window has room again), then whatever
        # else is in: waiting for all of them would drain the window before it refills.
        refs = list(self._refs)
        first, _ = ray.wait(refs, num_returns=1, timeout=timeout, fetch_local=True)
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=True) if first else ([], None)
        out = []
        for ref in done:
            dest = self._refs.pop(ref)
            link = self._links[dest]
            token, tag, rows, nbytes, codec = link.in_flight.pop(ref)
            try:
                _, service_s, fixed_s, busy_s = ray.get(ref)
            except ray.exceptions.RayError as e:
                link.monitor.on_lost(token)
                out.append(Delivery(dest, tag, rows, nbytes, codec, e))
                continue
            link.monitor.on_ack(token, service_s, fixed_s, busy_s)
            link.policy.update(link.monitor.stats(), self._encode_s)
            if codec != "probe":
                out.append(Delivery(dest, tag, rows, nbytes, codec))
        return out

    def in_flight(self, dest: Hashable) -> int:
        link = self._links.get(dest)
        return len(link.in_flight) if link else 0

    def set_backlog_age(self, dest: Hashable, age_s: float) -> None:
        self._link(dest).monitor.set_backlog_age(age_s)

    def due_probe(self, dest: Hashable) -> bool:
        return self._link(dest).monitor.due_probe()

    def stats(self, dest: Hashable) -> LinkStats:
        return self._link(dest).monitor.stats()

    def codec(self, dest: Hashable) -> tuple[int, str]:
        """The ladder level and name of the codec this link uses now."""
        codec = self._codecs[self._link(dest).policy.level]
        return codec.level, codec.name

    def wire_ratio(self, dest: Hashable) -> float:
        level = self._link(dest).policy.level
        return self._codecs[level].bytes_per_row / self._codecs[0].bytes_per_row

    def history(self, dest: Hashable) -> list[tuple[float, str]]:
        """When the link's codec changed, and to which."""
        return [(t, self._codecs[level].name) for t, level in self._link(dest).policy.history]

    def _link(self, dest: Hashable) -> _Link:
        link = self._links.get(dest)
        if link is None:
            rungs = [Rung(c.name, c.bytes_per_row) for c in self._codecs]
            link = _Link(LinkMonitor(), CodecPolicy(rungs, enabled=self.adaptive, **self._policy_args))
            if self.fixed is not None:
                link.policy.level = [c.name for c in self._codecs].index(self.fixed)
            self._links[dest] = link
        return link
