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
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vifusion._files import fsync_dir
from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FusedBatch

_MAGIC = b"VFWAL01\n"
_HEAD = struct.Struct("<IIQ")  # payload length, crc32(seq + payload), seq
_ADD, _DELETE = 1, 2
_DIM = VISUAL_DIM + SEMANTIC_DIM
_fadvise = getattr(os, "posix_fadvise", None)  # not on macOS: the cache keeps the log there
# The unit a write reaches the disk in (a disk sector; file system blocks are whole sectors):
# of a write a crash interrupted, what did not land is whole sectors, read back as zeros.
_SECTOR = 512
log = logging.getLogger(__name__)


class LogCorrupt(ValueError):
    """Damage in the log that is not a torn tail: acknowledged records may be unreadable."""


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


def _crc(seq: int, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(struct.pack("<Q", seq)))


def _segments(directory: Path) -> list[tuple[int, Path]]:
    found = []
    for p in directory.glob("*.log"):
        try:
            found.append((int(p.stem), p))
        except ValueError:
            continue
    return sorted(found)


def _read_segment(path: Path, last: bool) -> tuple[list[tuple[int, bytes]], int]:
    """The records of one segment and the byte offset after the last whole one.
    A bad record ends the segment if it is the last segment, no whole record follows it
    and it is torn (``_not_torn``): a torn tail."""
    data = path.read_bytes()
    if len(data) < len(_MAGIC):
        if last:
            return [], 0
        raise LogCorrupt(f"{path}: truncated segment header")
    if data[: len(_MAGIC)] != _MAGIC:
        raise LogCorrupt(f"{path}: not a write-ahead log segment")
    records, pos = [], len(_MAGIC)
    while pos < len(data):
        bad = pos + _HEAD.size > len(data)
        if not bad:
            length, crc, seq = _HEAD.unpack_from(data, pos)
            end = pos + _HEAD.size + length
            bad = end > len(data)
            if not bad:
                payload = data[pos + _HEAD.size : end]
                bad = _crc(seq, payload) != crc
        if bad:
            if last:
                prev = records[-1][0] if records else int(path.stem) - 1
                later = _next_record(data, pos + 1, prev)
                if later is not None:
                    raise LogCorrupt(
                        f"{path}: damaged record at byte {pos}, and a whole record "
                        f"(seq {later[1]}) after it at byte {later[0]}: not a torn tail"
                    )
                why = _not_torn(data, pos)
                if why:
                    raise LogCorrupt(
                        f"{path}: damaged record at byte {pos}, the last, {why}: not a torn tail"
                    )
                break
            raise LogCorrupt(f"{path}: damaged record at byte {pos}")
        records.append((seq, payload))
        pos = end
    return records, pos


def _not_torn(data: bytes, pos: int) -> str:
    """Why the bad last record at byte ``pos`` is damage and not a write a crash cut short
    ("": it may be one). A torn write runs past the end of the file, or has a sector of it
    that never landed (zeros; the sectors of an unsynced write land in any order). Whole,
    with no such sector, and failing its checksum, it was written and has changed since.
    So has one whose length field runs past the end where the bytes there are the whole
    record its checksum covers."""
    if pos + _HEAD.size > len(data):
        return ""
    length, crc, seq = _HEAD.unpack_from(data, pos)
    body = pos + _HEAD.size
    end = body + length
    if end > len(data):
        if _crc(seq, data[body:]) == crc:
            return (
                f"its length says {length} bytes, and the {len(data) - body} there hold a "
                f"whole record (seq {seq})"
            )
        return ""
    cuts = [pos, *range((pos // _SECTOR + 1) * _SECTOR, end, _SECTOR), end]
    if any(data.count(0, a, b) == b - a for a, b in zip(cuts, cuts[1:])):
        return ""
    return f"whole ({length} bytes, seq {seq}) and failing its checksum"


def _next_record(data: bytes, start: int, prev: int) -> tuple[int, int] | None:
    """The first whole record at or after byte ``start`` as (offset, seq), or None.

    Records carry no sync marker, so every offset is a candidate: its seq must come after
    ``prev`` (seqs rise by one per record, so by no more than the records that fit), its
    length must fit, and its CRC must match (a chance match of all three: ~2^-32 per
    candidate that passes the seq test). The seq test is done for all offsets at once."""
    top = prev + (len(data) - start) // _HEAD.size + 1
    seq_at = start + 8  # the seq field of a header at ``start``
    found = []
    for k in range(8):  # every offset = 8 interleaved runs of aligned u64
        count = (len(data) - seq_at - k) // 8
        if count <= 0:
            continue
        seqs = np.frombuffer(data, "<u8", count, seq_at + k)
        hits = np.flatnonzero((seqs > prev) & (seqs <= top))
        found.extend((start + k + 8 * hits).tolist())
    for pos in sorted(found):
        length, crc, seq = _HEAD.unpack_from(data, pos)
        end = pos + _HEAD.size + length
        if end <= len(data) and _crc(seq, data[pos + _HEAD.size : end]) == crc:
            return pos, seq
    return None


def records(directory: Path, after: int) -> Iterator[tuple[int, bytes]]:
    """The logged records with seq > ``after``, in order, as (seq, payload). Read-only: safe
    beside a writer (a record it is still writing reads as a torn tail and ends them)."""
    segments = _segments(Path(directory))
    for i, (_, path) in enumerate(segments):
        nxt = segments[i + 1][0] if i + 1 < len(segments) else None
        if nxt is not None and nxt <= after + 1:
            continue  # wholly covered by the snapshot
        found, _ = _read_segment(path, last=nxt is None)
        for seq, payload in found:
            if seq > after:
                yield seq, payload


def record_crc(directory: Path, seq: int) -> int | None:
    """The checksum of record ``seq`` (over its seq and payload), None where the log does not
    hold it: two replicas whose records at a seq differ hold different histories."""
    for found, payload in records(directory, seq - 1):
        return _crc(seq, payload) if found == seq else None
    return None


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
        segments = _segments(self.directory)
        for i, (first, path) in enumerate(segments):
            records, good = _read_segment(path, last=i == len(segments) - 1)
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
            if good < len(_MAGIC):
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
                self.bytes_since_rotate = good - len(_MAGIC)

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
            self._file.write(_HEAD.pack(len(payload), _crc(seq, payload), seq))
            self._file.write(payload)
            self._file.flush()
        except OSError:
            self._cut(start)
            raise
        self._end = start + _HEAD.size + len(payload)
        self.last_seq = seq  # after the flush: a sync that reads it covers the record
        self.bytes_since_rotate += _HEAD.size + len(payload)
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
        segments = _segments(self.directory)
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
            for _, path in _segments(self.directory):
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
        f.write(_MAGIC)
        f.flush()
        os.fsync(f.fileno())
        fsync_dir(self.directory)
        with self._sync_lock:
            self._file = open(path, "ab")
            self._end = len(_MAGIC)
        f.close()
