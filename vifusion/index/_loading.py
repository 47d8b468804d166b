"""How a shard reaches its state: the last snapshot, then the log after it (``Shard`` inherits
this); a reader that missed some of the writer's operations catches up the same way."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from vifusion.index import _snapshot
from vifusion.index._rows import DIMS
from vifusion.index._snapshot import SNAPSHOT
from vifusion.index.space import IndexPolicy, SpaceIndex
from vifusion.index.wal import LogCorrupt, replay

WAL_DIR = "wal"
_LOAD_TRIES = 5  # a reader racing the writer's snapshot + log clean-up starts over


class Loading:
    """The loading part of ``Shard``: it uses the shard's ``directory``, ``writer``,
    ``_policy`` and ``_apply``."""

    directory: Path
    writer: bool
    _policy: IndexPolicy

    def _reset(self) -> None:
        self._spaces = {s: SpaceIndex(d, self._policy) for s, d in DIMS.items()}
        # video_id -> {vector id -> (t_start, t_end)}, rows of every kind: per video so deletes
        # and counts are cheap.
        self._times: dict[int, dict[int, tuple[float, float]]] = {}
        self._seen: OrderedDict[str, None] = OrderedDict()
        self.seq = 0
        self._snapshot_seq = 0
        self._snapshot_size = 0

    def _load_state(self) -> None:
        """Last snapshot, then the log after it. A reader racing the writer (a snapshot
        replaced, log segments dropped) starts over; the writer must find no gap."""
        for _ in range(_LOAD_TRIES):
            self._reset()
            try:
                path = self.directory / SNAPSHOT
                if path.exists():
                    self._take(_snapshot.read(path, self._policy))
                gap = False
                for seq, op in replay(self.directory / WAL_DIR, self.seq):
                    if seq != self.seq + 1:
                        gap = True
                        break
                    self._apply(seq, op)
            except FileNotFoundError:
                gap = True
            if not gap:
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

    def _catch_up(self, through: int) -> None:
        for seq, op in replay(self.directory / WAL_DIR, self.seq):
            if seq > through:
                return
            if seq != self.seq + 1:
                break
            self._apply(seq, op)
        if self.seq < through:  # the log it needed was folded into a newer snapshot
            self._load_state()
