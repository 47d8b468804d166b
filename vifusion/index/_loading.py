"""How a shard reaches its state: the last snapshot, then the log after it (``Shard`` inherits
this); and how a replica that lacks some of another's operations gets them from it
(``changes_after`` there, ``install`` here): the log records after its seq where the other's
log still holds them, else the other's snapshot file and the log after it. Only bytes move
(through Ray between replicas, ``replica.py``): no replica reads another's directory.

A compressed space's vector file travels with the snapshot (its rows the snapshot counts);
the rows after them are rebuilt from the log records, as on a restart.

Limits: what is sent is held in memory whole on both sides (the snapshot file, up to the
index's size, the vector files, and the log after it, up to ``snapshot_log_bytes``)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from vifusion.index import _snapshot
from vifusion.index._rows import DIMS
from vifusion.index._snapshot import SNAPSHOT
from vifusion.index._times import TimeTable
from vifusion.index._vectors import VectorStore, install_file
from vifusion.index.space import IndexPolicy, SpaceIndex
from vifusion.index.wal import LogCorrupt, WriteAheadLog, decode, record_crc, records, replay

WAL_DIR = "wal"
_LOAD_TRIES = 5  # a reader racing the writer's snapshot + log clean-up starts over


@dataclass
class Changes:
    """What one replica sends another that is behind it: ``snapshot`` (its snapshot file's
    bytes; None: not needed) and its durable log records after ``base_seq`` (the
    snapshot's seq, or the asker's), as (seq, payload). ``reset``: the asker holds writes
    this replica never made durable (another history): it drops all it holds first."""

    snapshot: bytes | None
    base_seq: int
    records: list[tuple[int, bytes]]
    reset: bool = False
    vectors: dict[str, bytes] | None = None  # with a snapshot: its compressed spaces' files

    @property
    def seq(self) -> int:
        """The seq a replica holds once these are installed."""
        return self.records[-1][0] if self.records else self.base_seq


class Loading:
    """The loading part of ``Shard``: it uses the shard's ``directory``, ``writer``,
    ``_policy``, ``_apply``, ``_wal`` and its locks."""

    directory: Path
    writer: bool
    _policy: IndexPolicy
    _wal: WriteAheadLog | None
    _lock: threading.RLock
    _snapshot_lock: threading.Lock
    _stores: dict[str, VectorStore]

    def _reset(self) -> None:
        self._spaces = {s: SpaceIndex(d, self._policy) for s, d in DIMS.items()}
        self._times = TimeTable()  # every row's span, by video
        self._seen: OrderedDict[str, None] = OrderedDict()
        self.seq = 0
        self._snapshot_seq = 0
        self._snapshot_size = 0
        self._snapshot_rows: dict[str, int] = {}  # vector file rows the snapshot counts
        self._rebuilt = False  # an index replaced since the last snapshot (same seq)

    def _settle_stores(self) -> None:
        """A vector file no compressed space uses (left by a re-training a crash cut short,
        or from before a reset) is removed."""
        for space, store in self._stores.items():
            if self._spaces[space].store is not store:
                store.clear()

    def _load_state(self) -> None:
        """Last snapshot, then the log after it. A reader racing the writer (a snapshot
        replaced, log segments dropped) starts over; the writer must find no gap."""
        for _ in range(_LOAD_TRIES):
            self._reset()
            try:
                path = self.directory / SNAPSHOT
                if path.exists():
                    self._take(_snapshot.read(path, self._policy, self._stores))
                gap = False
                for seq, op in replay(self.directory / WAL_DIR, self.seq):
                    if seq != self.seq + 1:
                        gap = True
                        break
                    self._apply(seq, op)
            except FileNotFoundError:
                gap = True
            if not gap:
                self._settle_stores()
                return
            if self.writer:
                raise LogCorrupt(f"{self.directory}: the log has a gap after seq {self.seq}")
        raise LogCorrupt(
            f"{self.directory}: no consistent snapshot + log after {_LOAD_TRIES} tries"
        )

    def _take(self, loaded: _snapshot.Loaded) -> None:
        self._spaces, self._times = loaded.spaces, loaded.times
        self._seen = OrderedDict.fromkeys(loaded.seen)
        self.seq = self._snapshot_seq = loaded.seq
        self._snapshot_size = loaded.size
        self._snapshot_rows = loaded.vector_rows

    def position(self) -> tuple[int, int | None]:
        """The last seq held and its record's checksum (None: the log does not hold it, the
        state came from a snapshot): what another replica checks its history against."""
        with self._snapshot_lock:
            seq = self.seq
            return seq, self.crc_at(seq)

    def crc_at(self, seq: int) -> int | None:
        """The checksum of this replica's record ``seq`` (None: its log does not hold it)."""
        return record_crc(self.directory / WAL_DIR, seq) if seq > self._snapshot_seq else None

    def changes_after(
        self, after: int, crc: int | None = None, everything: bool = False
    ) -> Changes:
        """What a replica at seq ``after`` lacks of this one's durable state: the log records
        after ``after`` where this log still holds them, else the snapshot and the log after
        it. Nothing not yet synced here: a replica must never hold a write its source could
        still lose. An asker of another history (a directory from before this replica took
        over, say: ahead of its durable seq, or ``crc`` not its record's at ``after``), or
        one that asks for ``everything``, is sent all, to replace what it holds (``reset``).
        Held: the snapshot lock (no snapshot drops the log meanwhile)."""
        with self._snapshot_lock:
            with self._lock:
                durable = self._wal.durable_seq if self._wal is not None else self.seq
                snapshot_seq = self._snapshot_seq
            reset = everything or after > durable
            if not reset and crc is not None and after > 0:
                mine = self.crc_at(after)
                reset = mine is not None and mine != crc
            if reset:
                after = 0
            elif after == durable:
                return Changes(None, durable, [])
            snapshot = vectors = None
            if after < snapshot_seq:  # the log before the snapshot is gone: send the snapshot
                snapshot, after = (self.directory / SNAPSHOT).read_bytes(), snapshot_seq
                vectors = {
                    space: self._stores[space].file_bytes(rows)
                    for space, rows in self._snapshot_rows.items()
                }
            found = []
            for seq, payload in records(self.directory / WAL_DIR, after):
                if seq > durable:
                    break
                found.append((seq, payload))
        if [seq for seq, _ in found] != list(range(after + 1, durable + 1)):
            raise LogCorrupt(
                f"{self.directory}: the log lacks records between {after} and {durable}"
            )
        return Changes(snapshot, after, found, reset, vectors)

    def install(self, changes: Changes) -> int:
        """Take what another replica sent (``changes_after``): its snapshot where this replica
        is behind it, then the records after this replica's seq, each logged here, all synced
        before this returns. Returns the seq held (what the sender may count as held here)."""
        with self._snapshot_lock, self._lock:
            if changes.reset:
                self._wal.restart_after(0)  # the log first: see ``restart_after``
                (self.directory / SNAPSHOT).unlink(missing_ok=True)
                self._reset()
                self._settle_stores()
            if changes.snapshot is not None and changes.base_seq > self.seq:
                self._wal.restart_after(changes.base_seq)
                # The vector files before the snapshot that counts their rows, and never
                # under an old snapshot, whose rows they need not match.
                (self.directory / SNAPSHOT).unlink(missing_ok=True)
                for space, data in (changes.vectors or {}).items():
                    install_file(self._stores[space].path, data)
                _snapshot.install(self.directory, changes.snapshot)
                self._take(_snapshot.read(self.directory / SNAPSHOT, self._policy, self._stores))
                self._settle_stores()
            for seq, payload in changes.records:
                if seq <= self.seq:
                    continue
                if seq != self.seq + 1:
                    raise LogCorrupt(f"{self.directory}: sent seq {seq} after {self.seq}")
                self._wal.write_payload(payload)
                self._apply(seq, decode(payload))
            self._wal.sync(self.seq)
            return self.seq
