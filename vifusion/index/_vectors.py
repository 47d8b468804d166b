"""A compressed space's exact vectors: an append-only fp16 file on the shard's disk, read
through a memory map, and the map from vector id to the file's row.

The file: a 16-byte header (``MAGIC``, the dimension) and then one row of ``d`` fp16 values
per vector added, in order; a replaced or deleted vector's row stays (dead), and the id
map points at the newest row of each id.

Durability: the file is derived from the write-ahead log. It is synced before each snapshot
that counts its rows, and the snapshot records that count (and the id map): on loading,
rows past it (written after the snapshot, maybe torn) are cut and the log's replay writes
them again; a file shorter than the count lost synced rows, which is damage
(``VectorFileDamaged``: the shard refuses to start and ``vifusion check`` names it).

A reader (``writable=False``) never writes the file: the rows its log replay adds stay in
memory.

Reading: re-ranking reads about a thousand rows a query scattered over the file, so the map
is advised random: a page fault reads its page, not the kernel's read-ahead around it (up
to the disk's ``read_ahead_kb``), which on a file larger than the page cache read megabytes
a row and evicted the rows other searches had just read. A re-training space's pass through
the file in order reads through a second map left to the read-ahead.

Each fault waits for its page, so a cold re-ranking's thousand rows read one after another
took ~100 ms. Where the first rows of a read fault (``_gather``), the rest are read by
``_READERS`` threads at once: the disk answers many reads together, and numpy copies rows
without the interpreter's lock. A read whose first rows are cached stays on one thread,
which is faster than handing out the work.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import faiss
import numpy as np

MAGIC = b"VFVEC001"
HEADER = 16  # MAGIC, then the dimension (uint32) and 4 reserved bytes
VECTORS_DIR = "vectors"
_PIECE = 1 << 14  # rows converted to fp16 and written at a time
_READERS = 16  # threads faulting a cold read's rows in at once
_PROBE_ROWS = 32  # rows read first, on the caller's thread, to see whether they are cached
_PROBE_COLD_S = 0.001  # those rows took this long: several faulted, the file is cold there


class VectorFileDamaged(ValueError):
    """A vector file that lacks rows a snapshot counted, or is not a vector file."""


def path_for(directory: Path, space: str) -> Path:
    return Path(directory) / VECTORS_DIR / f"{space}.f16"


class VectorStore:
    """One space's exact vectors (the file) and where each id's newest row is."""

    def __init__(self, path: Path, d: int, writable: bool = True) -> None:
        self.path = path
        self.d = d
        self.writable = writable
        self.rows = 0  # rows held (the file's, then a reader's in-memory tail)
        self._file_rows = 0
        self._tail: list[np.ndarray] = []  # a reader's rows past the file's
        self._maps: dict[bool, mmap.mmap] = {}  # in order (a pass) or not -> the file's map
        self._fd: int | None = None
        self.ids = RowMap()
        self._fp16: faiss.IndexScalarQuantizer | None = None  # decodes rows to float32

    # -- opening ---------------------------------------------------------------------

    def open_at(self, rows: int, map_ids: np.ndarray, map_rows: np.ndarray) -> int:
        """Take the file as a snapshot left it: ``rows`` rows, ids at ``map_rows``. Returns
        how many rows past ``rows`` were cut (written after that snapshot, or torn)."""
        self._close()
        have = self._file_length_rows()
        if have < rows:
            raise VectorFileDamaged(
                f"{self.path}: holds {max(have, 0)} whole vector rows, the snapshot counts "
                f"{rows}: synced rows are lost"
            )
        cut = have - rows
        if cut and self.writable:
            with open(self.path, "r+b") as f:
                f.truncate(HEADER + rows * self.d * 2)
                os.fsync(f.fileno())
        self.rows = self._file_rows = rows
        self._tail = []
        self.ids = RowMap(map_ids, map_rows)
        return cut

    def clear(self) -> None:
        """Hold nothing: an empty file (a writer) or none at all."""
        self._close()
        self.rows = self._file_rows = 0
        self._tail = []
        self.ids = RowMap()
        if self.writable:
            self.path.unlink(missing_ok=True)

    def _file_length_rows(self) -> int:
        """Whole rows in the file after a valid header (-1: no file)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return -1
        with open(self.path, "rb") as f:
            head = f.read(HEADER)
        if len(head) < HEADER or head[:8] != MAGIC:
            raise VectorFileDamaged(f"{self.path}: not a vector file (bad header)")
        d = int.from_bytes(head[8:12], "little")
        if d != self.d:
            raise VectorFileDamaged(f"{self.path}: vectors of dim {d}, expected {self.d}")
        return (size - HEADER) // (self.d * 2)

    # -- writing ---------------------------------------------------------------------

    def append(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add rows for ``ids`` (their newest), not yet synced."""
        if not len(ids):
            return
        first = self.rows
        if self.writable:
            fd = self._open_fd()
            # in pieces: a whole space written at a switch would otherwise be copied whole
            for at in range(0, len(vectors), _PIECE):
                x = np.ascontiguousarray(vectors[at : at + _PIECE], np.float16)
                _write_all(fd, memoryview(x).cast("B"), HEADER + self._file_rows * self.d * 2)
                self._file_rows += len(x)
        else:
            self._tail.append(np.asarray(vectors, np.float16))
        self.rows += len(vectors)
        self.ids.set(np.asarray(ids, np.int64), np.arange(first, self.rows, dtype=np.int64))

    def sync(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def _open_fd(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fresh = not self.path.exists()
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            if fresh:
                head = MAGIC + self.d.to_bytes(4, "little") + bytes(4)
                os.pwrite(self._fd, head, 0)
        return self._fd

    # -- reading ---------------------------------------------------------------------

    def read(self, ids: np.ndarray) -> np.ndarray:
        """The exact vectors of these ids (each must be held), (n, d) float32."""
        return self.read_rows(self.ids.get(np.asarray(ids, np.int64)))

    def inner_products(self, queries: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Each query's inner product with the exact vector of each of its candidates:
        ``queries`` (nq, d), ``ids`` (nq, m) with -1 for none; (nq, m) float32, FAISS's
        minimum where there is none."""
        found = ids >= 0
        rows = np.zeros(ids.shape, np.int64)
        rows[found] = self.ids.get(ids[found])
        scores = np.full(ids.shape, -np.finfo(np.float32).max, np.float32)
        if found.any():
            x = self.read_rows(rows.ravel()).reshape(*ids.shape, self.d)
            exact = np.matmul(x, queries[:, :, None])[:, :, 0]
            scores[found] = exact[found]
        return scores

    def read_rows(self, rows: np.ndarray, in_order: bool = False) -> np.ndarray:
        """The vectors at ``rows``, (n, d) float32. ``in_order``: the rows are a piece of a
        pass through the file in order (a re-training's), read with the kernel's read-ahead."""
        in_file = rows < self._file_rows
        if in_file.all() and len(rows):  # the usual case: decoded by FAISS
            mapped = self._mapped(in_order)
            codes = (mapped[rows] if in_order else _gather(mapped, rows)).view(np.uint8)
            return self._decoder().sa_decode(codes)
        out = np.empty((len(rows), self.d), np.float32)
        if in_file.any():
            out[in_file] = self._mapped()[rows[in_file]]
        if not in_file.all():
            tail = np.concatenate(self._tail)
            out[~in_file] = tail[rows[~in_file] - self._file_rows]
        return out

    def _decoder(self) -> faiss.IndexScalarQuantizer:
        if self._fp16 is None:
            self._fp16 = faiss.IndexScalarQuantizer(
                self.d, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT
            )
        return self._fp16

    def _mapped(self, in_order: bool = False) -> np.ndarray:
        """The file's rows as an (n, d) fp16 array over a memory map, remapped as it grows:
        advised random, or, ``in_order``, left to the kernel's read-ahead (module docstring).
        An old map is dropped, not closed: a read on another thread (a re-training space's)
        may still hold a view of it; it closes once the last view goes."""
        n, m = self._file_rows, self._maps.get(in_order)
        if m is None or (len(m) - HEADER) // (self.d * 2) < n:
            with open(self.path, "rb") as f:
                m = self._maps[in_order] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            if not in_order:
                m.madvise(mmap.MADV_RANDOM)
        return np.frombuffer(m, np.float16, n * self.d, HEADER).reshape(n, self.d)

    def file_bytes(self, rows: int) -> bytes:
        """The file's first ``rows`` rows with its header, for another replica."""
        with open(self.path, "rb") as f:
            return f.read(HEADER + rows * self.d * 2)

    def _close(self) -> None:
        self._maps = {}
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _readers() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_READERS, thread_name_prefix="vector-read")
        return _pool


def _gather(mapped: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``mapped[rows]``, the rows past the first ``_PROBE_ROWS`` read by ``_READERS`` threads
    where those first ones faulted (module docstring)."""
    out = np.empty((len(rows), mapped.shape[1]), mapped.dtype)
    head = min(len(rows), _PROBE_ROWS)
    t0 = time.perf_counter()
    out[:head] = mapped[rows[:head]]
    if head == len(rows) or time.perf_counter() - t0 < _PROBE_COLD_S:
        out[head:] = mapped[rows[head:]]
        return out
    bounds = np.linspace(head, len(rows), _READERS + 1).astype(np.int64)

    def piece(i: int) -> None:
        a, b = bounds[i], bounds[i + 1]
        out[a:b] = mapped[rows[a:b]]

    list(_readers().map(piece, range(_READERS)))
    return out


def _write_all(fd: int, data: memoryview, offset: int) -> None:
    """``pwrite`` until every byte is written: one call may write fewer."""
    while data:
        n = os.pwrite(fd, data, offset)
        data, offset = data[n:], offset + n


def install_file(path: Path, data: bytes) -> None:
    """Write another replica's vector file as ``path``, synced, replacing any there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class RowMap:
    """Vector id -> row: a sorted array pair, plus the ids set since (a dict) until they
    are merged in, past a sixteenth of the sorted part (12 bytes an id once merged)."""

    def __init__(self, ids: np.ndarray | None = None, rows: np.ndarray | None = None) -> None:
        self._ids = np.zeros(0, np.int64) if ids is None else np.asarray(ids, np.int64)
        self._rows = np.zeros(0, np.int32) if rows is None else np.asarray(rows, np.int32)
        self._recent: dict[int, int] = {}

    def set(self, ids: np.ndarray, rows: np.ndarray) -> None:
        self._recent.update(zip(ids.tolist(), rows.tolist()))
        if len(self._recent) > max(4096, len(self._ids) // 16):
            self._merge()

    def get(self, ids: np.ndarray) -> np.ndarray:
        out = np.full(len(ids), -1, np.int64)
        if len(self._ids):
            # a re-ranking asks in scattered order; in ascending order each binary search
            # starts from the last one's answer, on pages it has just read
            order = np.argsort(ids)
            at = np.empty(len(ids), np.int64)
            at[order] = np.searchsorted(self._ids, ids[order])
            at = np.minimum(at, len(self._ids) - 1)
            hit = self._ids[at] == ids
            out[hit] = self._rows[at[hit]]
        if self._recent:
            recent = self._recent
            for j, i in enumerate(ids.tolist()):
                r = recent.get(i)
                if r is not None:
                    out[j] = r
        if (out < 0).any():
            raise KeyError(f"ids with no stored vector: {ids[out < 0][:5].tolist()}")
        return out

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(sorted ids, their rows), everything merged."""
        self._merge()
        return self._ids, self._rows

    @property
    def nbytes(self) -> int:
        return self._ids.nbytes + self._rows.nbytes + 100 * len(self._recent)

    def _merge(self) -> None:
        if not self._recent:
            return
        ids = np.concatenate([self._ids, np.fromiter(self._recent, np.int64, len(self._recent))])
        rows = np.concatenate(
            [self._rows, np.fromiter(self._recent.values(), np.int32, len(self._recent))]
        )
        order = np.argsort(ids, kind="stable")  # an id's newest row is last among its equals
        ids, rows = ids[order], rows[order]
        last = np.append(ids[1:] != ids[:-1], True)
        self._ids, self._rows = ids[last], rows[last]
        self._recent = {}
