"""Reading the shard's write-ahead log (``wal.py``): its on-disk format, the records of a
directory in order, and the difference between a torn tail, which a crash leaves and is cut
off, and damage, which is an error naming file and byte."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

MAGIC = b"VFWAL01\n"  # a segment's header
HEAD = struct.Struct("<IIQ")  # a record's: payload length, crc32(seq + payload), seq
# The unit a write reaches the disk in (a disk sector; file system blocks are whole sectors):
# of a write a crash interrupted, what did not land is whole sectors, read back as zeros.
_SECTOR = 512


class LogCorrupt(ValueError):
    """Damage in the log that is not a torn tail: acknowledged records may be unreadable."""


def checksum(seq: int, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(struct.pack("<Q", seq)))


def segment_files(directory: Path) -> list[tuple[int, Path]]:
    found = []
    for p in directory.glob("*.log"):
        try:
            found.append((int(p.stem), p))
        except ValueError:
            continue
    return sorted(found)


def read_segment(path: Path, last: bool) -> tuple[list[tuple[int, bytes]], int]:
    """The records of one segment and the byte offset after the last whole one.
    A bad record ends the segment if it is the last segment, no whole record follows it
    and it is torn (``_not_torn``): a torn tail."""
    data = path.read_bytes()
    if len(data) < len(MAGIC):
        if last:
            return [], 0
        raise LogCorrupt(f"{path}: truncated segment header")
    if data[: len(MAGIC)] != MAGIC:
        raise LogCorrupt(f"{path}: not a write-ahead log segment")
    records, pos = [], len(MAGIC)
    while pos < len(data):
        bad = pos + HEAD.size > len(data)
        if not bad:
            length, crc, seq = HEAD.unpack_from(data, pos)
            end = pos + HEAD.size + length
            bad = end > len(data)
            if not bad:
                payload = data[pos + HEAD.size : end]
                bad = checksum(seq, payload) != crc
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
    if pos + HEAD.size > len(data):
        return ""
    length, crc, seq = HEAD.unpack_from(data, pos)
    body = pos + HEAD.size
    end = body + length
    if end > len(data):
        if checksum(seq, data[body:]) == crc:
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
    top = prev + (len(data) - start) // HEAD.size + 1
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
        length, crc, seq = HEAD.unpack_from(data, pos)
        end = pos + HEAD.size + length
        if end <= len(data) and checksum(seq, data[pos + HEAD.size : end]) == crc:
            return pos, seq
    return None


def records(directory: Path, after: int) -> Iterator[tuple[int, bytes]]:
    """The logged records with seq > ``after``, in order, as (seq, payload). Read-only: safe
    beside a writer (a record it is still writing reads as a torn tail and ends them)."""
    segments = segment_files(Path(directory))
    for i, (_, path) in enumerate(segments):
        nxt = segments[i + 1][0] if i + 1 < len(segments) else None
        if nxt is not None and nxt <= after + 1:
            continue  # wholly covered by the snapshot
        found, _ = read_segment(path, last=nxt is None)
        for seq, payload in found:
            if seq > after:
                yield seq, payload


def record_crc(directory: Path, seq: int) -> int | None:
    """The checksum of record ``seq`` (over its seq and payload), None where the log does not
    hold it: two replicas whose records at a seq differ hold different histories."""
    for found, payload in records(directory, seq - 1):
        return checksum(seq, payload) if found == seq else None
    return None
