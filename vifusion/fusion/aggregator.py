"""The node aggregator: one Ray actor per node, between its extractors and the shards.

The host-level stand-in for in-network aggregation: every extractor on a node hands its
frames here (a local socket, ``handoff.py``), so the node sends one fused stream per
destination shard instead of one per extractor; consecutive near-duplicate frames of a video
become one vector (``dedup.py``). A pump thread sends each destination's buffer when it is
due (``policy.py``, ``buffer.py``) and the link's window has room, through the transport
(``comm/``); another thread collects acknowledgements, so the pump never waits for one.

A video is finished (``finish``) once every row of it is in its shard's write-ahead log.
``submit`` blocks while a destination's buffer holds a full batch (back-pressure: a row
waits behind at most one batch plus a window in flight). Table codecs (PQ, sparse) use the
newest tables under ``data_dir/codec``, else ones trained here from the first
``codec_train_rows`` rows (``_codec_tables.py``); one whose recall@10 is below
``codec_min_recall`` is never picked. Why: docs/benchmarks.md, "The node aggregator".
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import ray
from ray.actor import ActorHandle
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from vifusion.cluster.placement import planned_codec_floors
from vifusion.comm.codec import Ladder, SharedTables
from vifusion.comm.transport import Delivery, Transport
from vifusion.config import Config
from vifusion.datadir import CODEC
from vifusion.fusion._codec_tables import newest_tables, train_tables
from vifusion.fusion._deliveries import link_view, send_failed, video_counts
from vifusion.fusion._ring import Ring
from vifusion.fusion.buffer import FRAME_BYTES, FusionBuffer, Taken
from vifusion.fusion.dedup import TemporalDedup
from vifusion.fusion.handoff import open_server
from vifusion.fusion.policy import FlushPlan, FlushPolicy
from vifusion.types import FusedBatch, video_of

_IDLE_WAIT_S = 0.05
_UNFUSED = FlushPlan(FRAME_BYTES, 0.0, 64)
log = logging.getLogger(__name__)


class Aggregator:
    """Fuses the frames of all local extractors per destination shard and sends them."""

    def __init__(
        self,
        cfg: Config,
        shards: list[ActorHandle],
        tables: SharedTables | None = None,
        quality: dict[str, float] | None = None,
        *,
        codec_floor: str = "fp32",
    ) -> None:
        """``tables`` and their ``quality`` (``recall_at_k``): given, used as they are.
        ``codec_floor``: the least compressed codec its links may use (a plan's, for a node
        behind a narrow uplink), while compression is adaptive."""
        self.cfg = cfg
        self.shards = shards
        # One lock, three waits, each woken only by what it waits for: a wake-up costs a
        # context switch, and at 1 Gbit waking every waiter at every step was 13 a batch.
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # the pump: rows in, room in a window, urgency
        self._room = threading.Condition(self._lock)  # extractors: a buffer below a batch again
        # finish, abandon: rows acknowledged or failed
        self._settled = threading.Condition(self._lock)
        self._dedup = TemporalDedup(cfg.dedup_cosine if cfg.fusion else 2.0)
        self._buffers: dict[int, FusionBuffer] = {}
        self._plans: dict[int, FlushPlan] = {}
        self._urgent: set[int] = set()
        self._dest: dict[int, int] = {}  # video -> shard
        self._pending: Counter[int] = Counter()  # video -> rows in a buffer, not acknowledged
        self._failed: dict[int, Exception] = {}  # video -> what finish() raises
        self._sent: Counter[int] = Counter()  # video -> rows acknowledged
        self._counts: Counter[str] = Counter()
        self._codec_rows: Counter[str] = Counter()
        self._codec_bytes: Counter[str] = Counter()
        self._latencies = Ring(100_000)
        adaptive = cfg.compression == "adaptive"
        if tables is None and adaptive:
            tables, quality = newest_tables(cfg.data_dir / CODEC)
        self._tables = tables
        self._quality = quality or {}
        self._train_rows: list[np.ndarray] | None = [] if adaptive and tables is None else None
        self._new_tables: SharedTables | None = None
        self._transport = Transport(
            tables,
            adaptive=adaptive,
            allowed=self._allowed(),
            policy={"floor": Ladder().get(codec_floor).level} if adaptive else None,
            min_bytes=cfg.fusion_min_bytes,
            stream=cfg.fusion_stream,
        )
        self._flush = FlushPolicy(
            cfg.fusion_latency_target_s,
            min_bytes=cfg.fusion_min_bytes,
            max_bytes=cfg.fusion_max_bytes,
            inline_bytes=self._transport.inline_bytes,
        )
        self._stopped = False
        self.instance = uuid.uuid4().hex  # a restarted aggregator has forgotten what it held
        self._handoff = (
            open_server(self.submit, self.instance) if cfg.fusion_local_handoff else None
        )
        threading.Thread(
            target=self._loop, args=(self._pump_once,), name="aggregator-pump", daemon=True
        ).start()
        threading.Thread(
            target=self._loop, args=(self._collect_once,), name="aggregator-acks", daemon=True
        ).start()

    # -- extractors ------------------------------------------------------------------

    def submit(
        self, shard_no: int, batch: FusedBatch, extracted: float | None = None, urgent: bool = False
    ) -> str:
        """Hand over rows bound for shard ``shard_no``, each video's in stream order
        (``extracted``: wall-clock time they were embedded). Blocks while that shard's buffer
        holds a full batch, and returns once it holds less than one again. ``urgent`` (the
        query path): send without waiting for a batch to fill. Returns this aggregator's
        instance id: Ray restarts a dead aggregator empty, so a caller that sees the id change
        knows rows it handed over are lost."""
        batch.check()
        now = time.monotonic()
        extracted = time.time() if extracted is None else extracted
        videos = set(video_counts(batch.ids)[0])
        with self._lock:
            buf = self._buffers.setdefault(shard_no, FusionBuffer())
            self._wait_below_a_batch(shard_no, buf)
            for v in videos:
                self._dest[v] = shard_no
            self._keep_for_training(batch)
            self._counts["rows_in"] += len(batch)
            self._route(self._dedup.push(batch, now), now, extracted)
            if urgent:
                self._route(self._close_runs(videos), now, extracted)
                self._urgent.add(shard_no)
            self._work.notify()
            # Return once (nearly) all of it has left for the link: the caller's next rows are
            # made while these travel, not while they wait here (their wait is latency).
            self._wait_below_a_batch(shard_no, buf)
        return self.instance

    def handoff_address(self) -> tuple[str, bytes] | None:
        """Where extractors on this host hand rows over without an actor call, and the
        secret that lets them in (``handoff.py``); None: by ``submit`` only."""
        return (self._handoff.address, self._handoff.secret) if self._handoff else None

    def finish(self, video_id: int) -> tuple[int, str]:
        """End of a video: send what waits of it at once and return when every row is
        acknowledged: the number of vectors sent for it, and the instance id (see
        ``submit``). Raises if a send failed."""
        with self._lock:
            self._route(self._close_runs({video_id}), time.monotonic(), time.time())
            if video_id in self._dest:
                self._urgent.add(self._dest[video_id])
            self._work.notify()
            while self._pending[video_id] and video_id not in self._failed:
                self._settled.wait(0.5)
            sent = self._sent.pop(video_id, 0)
            error = self._failed.pop(video_id, None)
            if error is None:
                self._dest.pop(video_id, None)
                self._pending.pop(video_id, None)
        if error is not None:
            # Its rows still waiting or in flight stay counted: abandon() waits for them, so
            # a late acknowledgement cannot count against the video's next run.
            raise error
        return sent, self.instance

    def abandon(self, video_id: int) -> None:
        """A failed video: drop what waits of it and let its sends in flight settle, so the
        caller can delete whatever of it reached the shard."""
        with self._lock:
            self._dedup.drop(video_id)
            dest = self._dest.pop(video_id, None)
            if dest is not None:
                self._pending[video_id] -= self._buffers[dest].drop(video_id)
                self._room.notify_all()
            while self._pending[video_id] > 0:
                self._settled.wait(0.5)
            self._pending.pop(video_id, None)
            self._failed.pop(video_id, None)
            self._sent.pop(video_id, None)

    def stats(self) -> dict[str, Any]:
        """Rows in/out, bytes, codecs used, latency extraction -> acknowledged, and per link
        its statistics, plan and codec level history."""
        with self._lock:
            lat = self._latencies.values() if len(self._latencies) else np.zeros(1)
            return {
                **self._counts,
                "codec_rows": dict(self._codec_rows),
                "codec_bytes": dict(self._codec_bytes),
                "latency_p50_s": float(np.percentile(lat, 50)),
                "latency_p99_s": float(np.percentile(lat, 99)),
                "tables": self._tables.version if self._tables else None,
                "codecs_allowed": sorted(self._allowed()),
                "links": {
                    d: link_view(self._transport, d, plan) for d, plan in self._plans.items()
                },
            }

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for waiting in (self._work, self._room, self._settled):
                waiting.notify_all()
        if self._handoff:
            self._handoff.close()
        self._transport.close()

    # -- under the lock ----------------------------------------------------------------

    def _wait_below_a_batch(self, shard_no: int, buf: FusionBuffer) -> None:
        """Hold the calling extractor (``self._lock`` held) while ``buf`` holds a full batch."""
        while not self._stopped and buf.nbytes >= self._plan(shard_no).max_bytes:
            self._room.wait(0.1)

    def _plan(self, dest: int) -> FlushPlan:
        return self._plans.get(dest) or self._plan_for(None)

    def _plan_for(self, dest: int | None) -> FlushPlan:
        if not self.cfg.fusion:  # the baseline: every frame its own message, a window of 64
            return _UNFUSED
        if dest is None:
            return self._flush.plan(None)
        t = self._transport
        return self._flush.plan(t.stats(dest), t.wire_ratio(dest), t.by_stream(dest))

    def _route(self, batch: FusedBatch, now: float, extracted: float) -> None:
        """Rows into their destinations' buffers (a video goes where it was submitted)."""
        if not len(batch):
            return
        videos, counts = video_counts(batch.ids)
        self._pending.update(dict(zip(videos, counts, strict=True)))
        dests = {self._dest[v] for v in videos}
        if len(dests) == 1:
            self._buffers.setdefault(dests.pop(), FusionBuffer()).add(batch, now, extracted)
            return
        by_dest = np.array([self._dest[v] for v in video_of(batch.ids).tolist()])
        for d in dests:
            self._buffers.setdefault(d, FusionBuffer()).add(
                batch.rows(by_dest == d), now, extracted
            )

    def _close_runs(self, videos: set[int]) -> FusedBatch:
        return FusedBatch.concat([self._dedup.close(v) for v in videos])

    def _keep_for_training(self, batch: FusedBatch) -> None:
        if self._train_rows is None:
            return
        self._train_rows.append(batch.features.copy())
        if sum(len(r) for r in self._train_rows) >= self.cfg.codec_train_rows:
            rows, self._train_rows = np.concatenate(self._train_rows), None
            threading.Thread(
                target=self._train, args=(rows,), name="aggregator-train", daemon=True
            ).start()

    def _train(self, rows: np.ndarray) -> None:
        tables, quality = train_tables(rows, self.cfg.codec_sparse_keep, self.cfg.data_dir / CODEC)
        with self._lock:
            self._new_tables, self._quality = tables, quality

    def _allowed(self) -> set[str]:
        """Codecs the adaptive policy may pick: fp16 and int8 (bounded error), and the table
        codecs whose measured recall reaches the floor."""
        return {"fp16", "int8"} | {
            c for c, r in self._quality.items() if r >= self.cfg.codec_min_recall
        }

    # -- the pump ------------------------------------------------------------------------

    def _loop(self, step: Callable[[], None]) -> None:
        while not self._stopped:
            try:
                step()
            except Exception as e:  # a bug must not hang every waiting extractor: fail what waits
                log.exception("aggregator %s", step.__name__)
                with self._lock:
                    for v, n in self._pending.items():
                        if n:
                            self._failed.setdefault(
                                v, RuntimeError(f"aggregator failed: {type(e).__name__}: {e}")
                            )
                    self._settled.notify_all()

    def _pump_once(self) -> None:
        transport = self._transport
        sends: list[tuple[int, Taken, bool]] = []
        with self._lock:
            if self._new_tables is not None:
                self._tables, self._new_tables = self._new_tables, None
                transport.use_tables(self._tables, self._allowed())
            now = time.monotonic()
            age = self._flush.latency_target_s / 4
            self._route(self._dedup.expire(now - age), now, time.time())
            wait = _IDLE_WAIT_S
            room_again = False
            for dest, buf in self._buffers.items():
                plan = self._plan_for(dest)
                before = self._plans.get(dest)
                room_again |= before is not None and plan.max_bytes > before.max_bytes
                self._plans[dest] = plan
                oldest = buf.oldest()
                transport.set_backlog_age(dest, now - oldest if oldest is not None else 0.0)
                in_flight = transport.in_flight(dest)
                idle, room = not in_flight, plan.window - in_flight
                size = plan.max_bytes
                if idle and buf.nbytes < size:
                    # Less than a batch leaves at once, cut in up to a window of parts: the
                    # shard stores the first while the next travels.
                    size = max(math.ceil(buf.nbytes / room), self.cfg.fusion_min_bytes)
                while room > 0 and (
                    buf.due(plan, now, link_idle=idle) or (dest in self._urgent and len(buf))
                ):
                    sends.append((dest, buf.take(size), len(buf) > 0))
                    room -= 1
                if not len(buf):
                    self._urgent.discard(dest)
                elif room > 0:
                    wait = min(wait, max(oldest + plan.max_age_s - now, 0.001))
            if (runs := self._dedup.oldest()) is not None:
                wait = min(wait, max(runs + age - now, 0.001))
            if sends or room_again:
                self._room.notify_all()
            if not sends:  # until rows come in, acknowledgements make room, or the oldest is due
                self._work.wait(wait)
        for dest, taken, backlog in sends:
            try:
                transport.send(dest, self.shards[dest], taken.batch, backlog=backlog, tag=taken)
            except Exception as e:  # an encoding bug fails these rows' videos, not the pump
                self._settle([Delivery(dest, taken, len(taken.batch), 0, "", e)])
        for dest in list(self._buffers):
            if transport.due_probe(dest):
                transport.probe(dest, self.shards[dest])

    def _collect_once(self) -> None:
        self._settle(self._transport.poll(_IDLE_WAIT_S))

    def _settle(self, deliveries: list[Delivery]) -> None:
        if not deliveries:
            return
        acked = time.time()
        with self._lock:
            for d in deliveries:
                taken: Taken = d.tag
                for v, n in zip(*video_counts(taken.batch.ids), strict=True):
                    self._pending[v] -= n
                    if d.error is not None:
                        self._failed.setdefault(v, send_failed(d))
                    else:
                        self._sent[v] += n
                if d.error is None:
                    self._counts["rows_out"] += d.rows
                    self._counts["batches"] += 1
                    self._counts["wire_bytes"] += d.wire_bytes
                    self._counts["rows_by_stream"] += d.rows if d.by_stream else 0
                    self._counts["logical_bytes"] += taken.batch.nbytes
                    self._codec_rows[d.codec] += d.rows
                    self._codec_bytes[d.codec] += d.wire_bytes
                    self._latencies.extend(acked - taken.extracted)
            self._work.notify()
            self._settled.notify_all()


def start_aggregators(cfg: Config, shards: list[ActorHandle]) -> dict[str, ActorHandle]:
    """One aggregator on every alive node, pinned there, with the codec floor the applied
    plan sets for its node; by node id."""
    cls = ray.remote(Aggregator)
    floors = planned_codec_floors(cfg.plan)
    out = {}
    for node in ray.nodes():
        if not node["Alive"]:
            continue
        strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        out[node["NodeID"]] = cls.options(
            num_cpus=0, max_concurrency=64, max_restarts=-1, scheduling_strategy=strategy
        ).remote(cfg, shards, codec_floor=floors.get(node["NodeID"], "fp32"))
    return out
