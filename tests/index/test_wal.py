from __future__ import annotations

import ctypes
import mmap
import os
import re
from pathlib import Path

import pytest

from vifusion.index.wal import Delete, LogCorrupt, WriteAheadLog, decode, encode, replay

from ._helpers import make_batch, record_offsets


def test_operations_round_trip_bit_exact() -> None:
    batch = make_batch(7, 5, seed=1)
    back = decode(encode(batch))
    assert back.batch_id == batch.batch_id
    for a, b in ((back.ids, batch.ids), (back.times, batch.times), (back.features, batch.features)):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    assert decode(encode(Delete(123))) == Delete(123)


def _fill(directory: Path, n: int) -> list:
    log = WriteAheadLog(directory)
    ops = [make_batch(i, 3, seed=i) if i % 3 else Delete(i) for i in range(1, n + 1)]
    assert [log.append(op) for op in ops] == list(range(1, n + 1))
    log.close()
    return ops


def test_replay_returns_everything_after_a_seq_in_order(tmp_path: Path) -> None:
    ops = _fill(tmp_path, 6)
    got = list(replay(tmp_path, 2))
    assert [seq for seq, _ in got] == [3, 4, 5, 6]

    def key(op):
        return op if isinstance(op, Delete) else op.batch_id

    assert [key(op) for _, op in got] == [key(op) for op in ops[2:]]


@pytest.mark.parametrize("cut", [1, 10, 16, 17, 500])
def test_a_torn_tail_is_cut_off_logged_and_numbering_goes_on(
    tmp_path: Path, cut: int, caplog: pytest.LogCaptureFixture
) -> None:
    _fill(tmp_path, 4)
    seg = next(tmp_path.glob("*.log"))
    size = seg.stat().st_size
    last = len(encode(make_batch(4, 3, seed=4))) + 16
    torn = min(cut, last - 1)
    with open(seg, "r+b") as f:  # a crash while writing the last record
        f.truncate(size - last + torn)
    assert [seq for seq, _ in replay(tmp_path, 0)] == [1, 2, 3]
    with caplog.at_level("WARNING", logger="vifusion.index.wal"):
        log = WriteAheadLog(tmp_path)
    assert log.last_seq == 3
    assert seg.stat().st_size == size - last  # the torn bytes are gone
    assert f"cut off a torn tail after seq 3: {torn} bytes at byte {size - last}" in caplog.text
    assert log.append(Delete(9)) == 4
    assert [seq for seq, _ in replay(tmp_path, 0)] == [1, 2, 3, 4]


# in the last record's header: length (its low byte, one in the middle, its high byte), crc,
# seq; then in its payload: the type, the features, the last byte
@pytest.mark.parametrize("where", [0, 1, 3, 4, 8, 16, 300, -1])
def test_a_whole_last_record_that_fails_its_checksum_is_damage_not_a_torn_tail(
    tmp_path: Path, where: int
) -> None:
    """Five records synced (acknowledged), one bit flipped in the last: a torn write is short
    or has sectors that never landed (zeros), not whole with a bit changed. Replay and the
    writer refuse, naming file and byte, and the file is left as it was: cutting the record
    would drop an acknowledged write (on one replica: a history the others do not share)."""
    _fill(tmp_path, 5)
    seg = next(tmp_path.glob("*.log"))
    last = record_offsets(seg)[-1]
    data = bytearray(seg.read_bytes())
    data[last + where if where >= 0 else where] ^= 0x01
    seg.write_bytes(bytes(data))
    said = rf"{seg}: damaged record at byte {last}, the last, .*: not a torn tail"
    with pytest.raises(LogCorrupt, match=said):
        list(replay(tmp_path, 0))
    with pytest.raises(LogCorrupt, match=said):
        WriteAheadLog(tmp_path)
    assert seg.read_bytes() == bytes(data)


def test_a_length_flipped_past_the_end_of_the_file_is_named(tmp_path: Path) -> None:
    """A record whose length field grew past the end of the file looks short, but the bytes
    that are there make the whole record its checksum covers: damage, said as such."""
    _fill(tmp_path, 2)
    seg = next(tmp_path.glob("*.log"))
    last = record_offsets(seg)[-1]
    data = bytearray(seg.read_bytes())
    data[last + 3] ^= 0x01  # the length's high byte: 16 MiB more
    seg.write_bytes(bytes(data))
    with pytest.raises(
        LogCorrupt,
        match=r"its length says \d+ bytes, and the \d+ there hold a whole record \(seq 2\)",
    ):
        WriteAheadLog(tmp_path)


@pytest.mark.parametrize("where", [0, 4, 8, 16, 60])  # length, crc, seq, payload type, payload
def test_damage_with_whole_records_after_it_is_an_error_even_in_the_last_segment(
    tmp_path: Path, where: int
) -> None:
    """Five acknowledged records, one byte flipped in the first: not a torn tail. Replay and
    the writer both stop naming the file and the byte, and the file is left as it was
    (cutting it would drop four acknowledged records and hand their seqs out again)."""
    _fill(tmp_path, 5)
    seg = next(tmp_path.glob("*.log"))
    first = record_offsets(seg)[0]
    data = bytearray(seg.read_bytes())
    data[first + where] ^= 0x01
    seg.write_bytes(bytes(data))
    said = (
        rf"{seg}: damaged record at byte {first}, and a whole record \(seq 2\) after it at byte \d+"
    )
    with pytest.raises(LogCorrupt, match=said):
        list(replay(tmp_path, 0))
    with pytest.raises(LogCorrupt, match=said):
        WriteAheadLog(tmp_path)
    assert seg.read_bytes() == bytes(data)


def test_damage_in_the_middle_of_the_last_segment_names_the_next_whole_record(
    tmp_path: Path,
) -> None:
    _fill(tmp_path, 5)
    seg = next(tmp_path.glob("*.log"))
    offsets = record_offsets(seg)
    data = bytearray(seg.read_bytes())
    data[offsets[1] + 100] ^= 0xFF  # in the second record's features
    seg.write_bytes(bytes(data))
    with pytest.raises(
        LogCorrupt,
        match=rf"damaged record at byte {offsets[1]}, and a whole record "
        rf"\(seq 3\) after it at byte {offsets[2]}",
    ):
        WriteAheadLog(tmp_path)


def _sector_after(offset: int) -> int:
    return (offset // 512 + 1) * 512


@pytest.mark.parametrize(
    "unwritten",
    ["the rest, and a page more", "all of it, and a page more", "one sector in the middle"],
)
def test_a_last_record_with_sectors_that_never_landed_is_a_torn_tail(
    tmp_path: Path, unwritten: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A crash can leave the file longer than what reached it, and the sectors of an unsynced
    write land in any order: what did not land reads as zeros. Cut off, and logged."""
    _fill(tmp_path, 5)
    seg = next(tmp_path.glob("*.log"))
    last = record_offsets(seg)[-1]
    data = bytearray(seg.read_bytes())
    size = len(data)
    if unwritten == "the rest, and a page more":
        zero = _sector_after(last + 20)
        data[zero:] = bytes(size - zero + 4096)
    elif unwritten == "all of it, and a page more":
        data[last:] = bytes(size - last + 4096)
    else:
        zero = _sector_after(last + 20)
        data[zero : zero + 512] = bytes(512)
        assert len(data) == size
    seg.write_bytes(bytes(data))
    assert [seq for seq, _ in replay(tmp_path, 0)] == [1, 2, 3, 4]
    with caplog.at_level("WARNING", logger="vifusion.index.wal"):
        assert WriteAheadLog(tmp_path).last_seq == 4 and seg.stat().st_size == last
    assert (
        f"cut off a torn tail after seq 4: {len(data) - last} bytes at byte {last}" in caplog.text
    )


def test_damage_before_the_tail_is_an_error_not_a_silent_loss(tmp_path: Path) -> None:
    log = WriteAheadLog(tmp_path)
    log.append(make_batch(1, 3))
    log.rotate()
    log.append(make_batch(2, 3))
    log.close()
    first = sorted(tmp_path.glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    data[40] ^= 0xFF
    first.write_bytes(bytes(data))
    with pytest.raises(LogCorrupt, match="damaged record"):
        list(replay(tmp_path, 0))


def test_rotation_and_dropping_covered_segments(tmp_path: Path) -> None:
    log = WriteAheadLog(tmp_path)
    log.append(Delete(1))
    log.append(Delete(2))
    log.rotate()
    log.append(Delete(3))
    assert len(list(tmp_path.glob("*.log"))) == 2
    log.drop_through(2)
    assert [seq for seq, _ in replay(tmp_path, 2)] == [3]
    assert len(list(tmp_path.glob("*.log"))) == 1
    log.rotate()
    log.drop_through(3)
    assert list(tmp_path.glob("*.log")) == []
    # With every segment gone, numbering continues after the snapshot's seq.
    assert WriteAheadLog(tmp_path, after=3).append(Delete(4)) == 4


_FULL_DISK = r"""
import os, resource, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from tests.index._helpers import make_batch
from vifusion.index.wal import WriteAheadLog

log = WriteAheadLog(Path(sys.argv[1]))
log.append(make_batch(1, 3, seed=1))
size = os.path.getsize(log._file.name)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
limits = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 2000, limits[1]))  # room for part of a record
try:
    log.append(make_batch(2, 3, seed=2))
    print("no error")
except OSError as e:
    print("refused", e.errno)
resource.setrlimit(resource.RLIMIT_FSIZE, limits)  # space again
print("seq", log.append(make_batch(3, 3, seed=3)))
"""


def test_a_write_that_fails_half_way_leaves_no_torn_record_behind(tmp_path: Path) -> None:
    """Disk full mid-record: the failed append is cut off, so the next one is not stranded
    behind a torn record (replay would take that for damage in the middle of the log)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(tmp_path), str(root)],
        capture_output=True,
        text=True,
        check=True,
    )
    out = proc.stdout.split("\n")
    assert out[0] == "refused 27"  # EFBIG: the file may not grow
    assert out[1] == "seq 2"  # the failed append took no number
    assert re.search(r"cut off seq 2, its write failed: \d+ bytes at byte \d+", proc.stderr)
    got = list(replay(tmp_path, 0))
    assert [seq for seq, _ in got] == [1, 2]
    assert got[1][1].ids.tolist() == make_batch(3, 3, seed=3).ids.tolist()


def _resident_pages(path: Path) -> list[bool]:
    """Which pages of a file the page cache holds (mincore(2) on a mapping of it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = path.stat().st_size
    pages = -(-size // mmap.PAGESIZE)
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        vec = ctypes.create_string_buffer(pages)
        assert libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
        libc.munmap(addr, size)
    finally:
        os.close(fd)
    return [bool(b & 1) for b in vec.raw]


def _filesystem(path: Path) -> str:
    """The type of the filesystem ``path`` is on (the longest mount point above it)."""
    best, kind = "", ""
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mount, fs = line.split()[:3]
        if str(path.resolve()).startswith(mount.rstrip("/") + "/") and len(mount) > len(best):
            best, kind = mount, fs
    return kind


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise on this platform")
def test_synced_records_leave_the_page_cache_and_still_replay(tmp_path: Path) -> None:
    """The log drops what it has synced from the page cache (appends into a growing cache
    cost several times as much here, benchmarks/wal.py); only the partly written last page
    stays, and every record still reads back."""
    if _filesystem(tmp_path) in ("tmpfs", "devtmpfs", "ramfs"):
        pytest.skip("a memory filesystem keeps files in the page cache: there is nothing to drop")
    log = WriteAheadLog(tmp_path)
    batches = [make_batch(i, 40, seed=i) for i in range(1, 6)]  # ~270 KB each
    for b in batches:
        log.append(b)
    path = Path(log._file.name)
    resident = _resident_pages(path)
    assert len(resident) > 300
    assert sum(resident[:-1]) == 0
    log.close()
    assert [op.batch_id for _, op in replay(tmp_path, 0)] == [b.batch_id for b in batches]


def test_one_sync_makes_every_record_written_before_it_durable(tmp_path: Path) -> None:
    """A group commit: records written while the last one synced are made durable by one
    sync, and syncing through a seq already durable costs nothing."""
    log = WriteAheadLog(tmp_path)
    first, second = log.write(make_batch(1, 4, seed=1)), log.write(make_batch(2, 4, seed=2))
    assert (first, second, log.durable_seq) == (1, 2, 0)
    assert log.sync(first) > 0
    assert log.durable_seq == 2
    assert log.sync(second) == 0.0
    log.close()
    assert [seq for seq, _ in replay(tmp_path, 0)] == [1, 2]


def test_a_failed_sync_refuses_every_later_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a failed fdatasync the kernel may have dropped the dirty pages and report the
    next sync as a success: the log must acknowledge nothing more until it is reopened."""
    log = WriteAheadLog(tmp_path)
    log.append(make_batch(1, 4, seed=1))
    seq = log.write(make_batch(2, 4, seed=2))

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(OSError, match="Input/output"):
        log.sync(seq)
    monkeypatch.undo()
    for attempt in (lambda: log.sync(seq), lambda: log.write(make_batch(3, 4, seed=3))):
        with pytest.raises(OSError, match="Input/output"):
            attempt()
    assert log.durable_seq == 1
    log.close()
    assert WriteAheadLog(tmp_path).last_seq == 2  # reopened: what the disk holds, read back
