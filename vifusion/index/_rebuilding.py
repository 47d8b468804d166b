"""How a shard rebuilds a space's index (``Shard`` inherits this): off the write path, with
the type its size calls for (``space.py``). Searches and writes go on against the old index;
the writes made meanwhile are captured and applied to the new one, in order, before it
replaces the old under the shard's lock. A compressed index is built from the space's vector
file, read outside the lock (rows already written never change); the shards of one index
folder take turns (``one_rebuild_at_a_time``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from vifusion.index._times import TimeTable
from vifusion.index._upkeep import one_rebuild_at_a_time
from vifusion.index._vectors import VectorStore
from vifusion.index.space import IndexPolicy, SpaceIndex
from vifusion.types import KIND_OF_SPACE, kind_of

_FILL_PIECE = 1 << 16  # vectors copied into a vector file under the lock at a time


class Rebuilding:
    """The rebuilding part of ``Shard``: it uses the shard's ``directory``, ``writer``,
    ``_spaces``, ``_stores``, ``_times``, ``_capture``, ``_trained``, ``_policy``, its lock,
    ``_use_threads`` and ``_upkeep``."""

    directory: Path
    shard_no: int
    writer: bool
    _spaces: dict[str, SpaceIndex]
    _stores: dict[str, VectorStore]
    _times: TimeTable
    _capture: dict[str, list[tuple]]
    _trained: dict[str, tuple[float, float]]
    _policy: IndexPolicy
    _lock: threading.RLock
    _rebuilt: bool

    def _rebuild(self, space: str) -> None:
        """Rebuild one space's index, if its size still calls for it."""
        self._use_threads()
        with one_rebuild_at_a_time(self.directory):
            self._rebuild_now(space)
        # writes during the rebuild may have grown the space past the next size (they do
        # not schedule a rebuild of a space being rebuilt)
        self._upkeep()

    def _rebuild_now(self, space: str) -> None:
        store = self._stores[space]
        with self._lock:
            old = self._spaces[space]
            if not old.needs_rebuild(codes=self.writer) or space in self._capture:
                return
            ids, _ = self._times.arrays()  # merged: no copy per video
            ids = ids[kind_of(ids) == KIND_OF_SPACE[space]]
            compress = old.compressed or self._policy.compresses(len(ids))
            rows = store.ids.get(ids) if old.compressed else None
            vectors = None if compress else old.reconstruct(ids)
            self._capture[space] = []
            began = time.time()
        try:
            if compress and not old.compressed:
                store.clear()  # what a re-training cut short left (only it used the file)
                ids, rows = self._fill_store(space, old, ids)
            if compress:
                new = SpaceIndex.build_compressed(
                    old.d, self._policy, ids, rows, store, self.shard_no
                )
            else:
                new = SpaceIndex.build(old.d, self._policy, ids, vectors, self.shard_no)
            del vectors
            with self._lock:
                if self._spaces[space] is not old:  # replaced meanwhile (``install``)
                    return
                # in order: a replaced id's removal precedes its add; a store the old index
                # shares holds the added vectors already
                for op in self._capture[space]:
                    if op[0] == "add":
                        new.add(op[1], op[2], stored=old.compressed)
                    else:
                        new.remove(op[1])
                self._spaces[space] = new
                self._trained[space] = (began, time.time())
                self._rebuilt = True  # the next snapshot holds it, so a restart skips training
        finally:
            with self._lock:
                self._capture.pop(space, None)

    def _fill_store(
        self, space: str, old: SpaceIndex, ids: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Write an uncompressed space's vectors to its empty vector file a piece at a time,
        each read from the index under the lock; ids deleted meanwhile are left out (their
        removal is captured). Returns the ids written and their rows."""
        store, kept = self._stores[space], []
        for at in range(0, len(ids), _FILL_PIECE):
            piece = ids[at : at + _FILL_PIECE]
            with self._lock:
                piece = piece[self._times.find(piece)[0]]
                vectors = old.reconstruct(piece)
            store.append(piece, vectors)
            kept.append(piece)
        ids = np.concatenate(kept) if kept else ids[:0]
        return ids, store.ids.get(ids)
