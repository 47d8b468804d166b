"""The shard's write-ahead log: every add and delete is on disk (fsynced) before it is
acknowledged, so a crash loses nothing a sender was told had landed.

``write`` and ``sync`` are apart: one fdatasync serves every record written by then (a
group commit). A sync that fails leaves the log refusing every later write until a restart
reads back what the disk really holds (a retry can report success without the records).

Layout: ``<shard dir>/wal/<first seq>.log`` segments, each a header then records
``[length u32][crc32 u32][seq u64][payload]``; seqs start at 1 and never repeat in a
shard's history. ``drop_through`` deletes segments a snapshot made redundant.

Every replica of a shard keeps its own log in its own directory, with the primary's seqs:
a follower writes each forwarded record at the seq the primary gave it, and a replica
catching up is sent the raw records (``records``) to write as they are.

Limits: one writer per directory (readers only ``replay``). A record torn at the end of the
last segment is cut off, and the cut logged (seq, bytes). Torn means what a crash leaves of
an unsynced write: short of the length its header gives, or with sectors that never landed
(zeros); a last record there whole that fails its checksum was synced (and may have been
acknowledged) and has changed since: damage, like damage anywhere else an error naming file
and byte, never skipped. (A damaged record that happens to hold a whole sector of zeros reads
as torn.) Why: docs/benchmarks.md, "Design notes moved from docstrings".
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vifusion._files import fsync_dir
from vifusion.index._wal_read import (
    HEAD,
    MAGIC,
    LogCorrupt,
    checksum,
    read_segment,
    record_crc,
    records,
    segment_files,
)
from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FusedBatch

_ADD, _DELETE = 1, 2
_DIM = VISUAL_DIM + SEMANTIC_DIM
_fadvise = getattr(os, "posix_fadvise", None)  # not on macOS: the cache keeps the log there
log = logging.getLogger(__name__)
# what the shard, its loading and its replicas use; the reading end lives in _wal_read.py
__all__ = [
    "Delete",
    "LogCorrupt",
    "Op",
    "WriteAheadLog",
    "decode",
    "encode",
    "record_crc",
    "records",
    "replay",
]


@dataclass(frozen=True)
class Delete:
    video_id: int


Op = FusedBatch | Delete


def encode(op: Op) -> bytes:
    """One operation as a record payload."""
    if isinstance(op, Delete):
        return struct.pack("<Bq", _DELETE, op.video_id)
    bid = op.batch_id.encode()
    n = len(op.ids)
    return b"".join(
        (
            struct.pack("<BHI", _ADD, len(bid), n),
            bid,
            np.ascontiguousarray(op.ids, np.int64).tobytes(),
            np.ascontiguousarray(op.times, np.float32).tobytes(),
            np.ascontiguousarray(op.features, np.float32).tobytes(),
        )
    )


def decode(payload: bytes) -> Op:
    """The operation a record payload holds (arrays are read-only views of ``payload``)."""
    kind = payload[0]
    if kind == _DELETE:
        return Delete(struct.unpack_from("<q", payload, 1)[0])
    if kind != _ADD:
        raise LogCorrupt(f"unknown record type {kind}")
    _, blen, n = struct.unpack_from("<BHI", payload, 0)
    pos = 7
    bid = payload[pos : pos + blen].decode()
    pos += blen
    ids = np.frombuffer(payload, np.int64, n, pos)
    pos += ids.nbytes
    times = np.frombuffer(payload, np.float32, 2 * n, pos).reshape(n, 2)
    pos += times.nbytes
    features = np.frombuffer(payload, np.float32, n * _DIM, pos).reshape(n, _DIM)
    return FusedBatch(ids=ids, times=times, features=features, batch_id=bid)


def replay(directory: Path, after: int) -> Iterator[tuple[int, Op]]:
    """The logged operations with seq > ``after``, in order (``records``, decoded)."""
    for seq, payload in records(directory, after):
        yield seq, decode(payload)


class WriteAheadLog:
    """The writing end. Opening it cuts a torn tail off the last segment; ``after`` is the
    seq of the snapshot it continues (new records are numbered after both).

    One thread writes (``write``, ``rotate``, ``drop_through``); any thread may ``sync``."""

    def __init__(self, directory: Path, after: int = 0) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.last_seq = after  # written (flushed to the OS); ``durable_seq``: synced
        self.bytes_since_rotate = 0
        self.last_sync_s = (
            0.0  # how long the last fdatasync took (a write that waits for its own pays it)
        )
        # Guards the open file against a switch (rotate, cut) during a sync, and orders syncs.
        self._sync_lock = threading.Lock()
        self._failed: OSError | None = None
        segments = segment_files(self.directory)
        for i, (first, path) in enumerate(segments):
            records, good = read_segment(path, last=i == len(segments) - 1)
            if records:
                self.last_seq = records[-1][0]
            elif i == len(segments) - 1:
                self.last_seq = max(self.last_seq, first - 1)
        self.durable_seq = self.last_seq
        self._file = None
        self._end = 0  # the file offset after the last record written
        if segments:
            path = segments[-1][1]
            size = path.stat().st_size
            if good < len(MAGIC):
                log.warning(
                    "%s: cut off a torn segment after seq %d: %d bytes, no whole header",
                    path,
                    self.last_seq,
                    size,
                )
                path.unlink()
                fsync_dir(self.directory)
            else:
                if good < size:  # the torn tail: never synced, so never acknowledged
                    log.warning(
                        "%s: cut off a torn tail after seq %d: %d bytes at byte %d",
                        path,
                        self.last_seq,
                        size - good,
                        good,
                    )
                    with open(path, "r+b") as f:
                        f.truncate(good)
                        os.fsync(f.fileno())
                self._file = open(path, "ab")
                self._end = good
                self.bytes_since_rotate = good - len(MAGIC)

    def append(self, op: Op) -> int:
        """Write one operation durably; return its seq. Only then may it be acknowledged."""
        seq = self.write(op)
        self.sync(seq)
        return seq

    def write(self, op: Op) -> int:
        """Write one operation to the log, not yet durable (``sync``); return its seq."""
        return self.write_payload(encode(op))

    def write_payload(self, payload: bytes) -> int:
        """``write`` for an operation already encoded (a record another replica logged)."""
        if self._failed is not None:
            raise self._failed
        if self._file is None:
            self._open_segment(self.last_seq + 1)
        seq = self.last_seq + 1
        start = self._file.tell()
        try:
            self._file.write(HEAD.pack(len(payload), checksum(seq, payload), seq))
            self._file.write(payload)
            self._file.flush()
        except OSError:
            self._cut(start)
            raise
        self._end = start + HEAD.size + len(payload)
        self.last_seq = seq  # after the flush: a sync that reads it covers the record
        self.bytes_since_rotate += HEAD.size + len(payload)
        return seq

    def sync(self, through: int) -> float:
        """Make the records through seq ``through`` durable, and with them every record
        written by then: one sync for all the writes waiting on it. Returns the seconds spent
        in fdatasync (0: they already were durable)."""
        with self._sync_lock:
            if self._failed is not None:
                raise self._failed
            if self.durable_seq >= through:
                return 0.0
            target, end, f = self.last_seq, self._end, self._file
            t0 = time.perf_counter()
            try:
                os.fdatasync(f.fileno())
            except OSError as e:
                self._failed = e
                raise
            self.last_sync_s = time.perf_counter() - t0
            self.durable_seq = target
            self._uncache(f, end)
            return self.last_sync_s

    def rotate(self) -> None:
        """Start a new segment for the records after ``last_seq`` (a snapshot is coming)."""
        self.sync(self.last_seq)  # the old segment is whole on disk before it is left
        with self._sync_lock:
            if self._file is not None:
                self._file.close()
                self._file = None
        self.bytes_since_rotate = 0

    def drop_through(self, seq: int) -> None:
        """Delete the segments whose records all have seq <= ``seq`` (a durable snapshot holds them)."""
        segments = segment_files(self.directory)
        dropped = False
        for i, (_, path) in enumerate(segments):
            nxt = segments[i + 1][0] if i + 1 < len(segments) else self.last_seq + 1
            if nxt <= seq + 1 and (self._file is None or path != Path(self._file.name)):
                path.unlink()
                dropped = True
        if dropped:
            fsync_dir(self.directory)

    def restart_after(self, seq: int) -> None:
        """Delete every segment and go on from ``seq``: a snapshot of another replica's that
        holds seq ``seq`` is about to replace this replica's state. Deleting first means a
        crash in between leaves the replica's older snapshot and no log: behind, consistent."""
        self.sync(self.last_seq)
        with self._sync_lock:
            if self._file is not None:
                self._file.close()
                self._file = None
            for _, path in segment_files(self.directory):
                path.unlink()
            fsync_dir(self.directory)
            self.last_seq = self.durable_seq = seq
            self._end = 0
        self.bytes_since_rotate = 0

    def close(self) -> None:
        with self._sync_lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    @staticmethod
    def _uncache(f, end: int) -> None:
        """Drop the synced log from the page cache (all but its last, partly written page).
        Nothing reads it back until a restart, and a cache that grows with the log makes
        every append dearer: on this VM, once it held a few hundred MB, a 500 KB write took
        1.3 ms against 0.1 ms, and the shard spent a third of its CPU in that copy at
        1 Gbit (``benchmarks/wal.py``). Only a hint: the record is durable whether it
        takes or not. (``f`` and ``end``: the file and its length as the sync began.)"""
        if _fadvise is not None:
            with contextlib.suppress(OSError):
                _fadvise(f.fileno(), 0, end & ~(mmap.PAGESIZE - 1), os.POSIX_FADV_DONTNEED)

    def _cut(self, size: int) -> None:
        """A write failed (disk full, I/O error): drop what of it reached the file, so the
        next record does not follow a torn one (which a restart would take for damage in
        the middle of the log). The failed operation was never acknowledged."""
        with self._sync_lock:
            path = Path(self._file.name)
            with contextlib.suppress(OSError):
                self._file.close()  # may fail again flushing the rest of the buffer: it is dropped below
            with open(path, "r+b") as f:
                written = os.fstat(f.fileno()).st_size - size
                f.truncate(size)
                os.fsync(f.fileno())
            log.warning(
                "%s: cut off seq %d, its write failed: %d bytes at byte %d",
                path,
                self.last_seq + 1,
                written,
                size,
            )
            self._file = open(path, "ab")

    def _open_segment(self, first_seq: int) -> None:
        path = self.directory / f"{first_seq:020d}.log"
        f = open(path, "wb")
        f.write(MAGIC)
        f.flush()
        os.fsync(f.fileno())
        fsync_dir(self.directory)
        with self._sync_lock:
            self._file = open(path, "ab")
            self._end = len(MAGIC)
        f.close()
