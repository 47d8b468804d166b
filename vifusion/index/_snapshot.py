"""A shard's snapshot file: every space's index, each row's time span, the last log seq and
the batch ids seen, in one ``.npz`` written atomically (temp file, fsync, rename, fsync of
the directory: a crash leaves the previous snapshot or this one, never a torn file).

A compressed space's entry also holds its vector file's row count and id -> row map
(``_vectors.py``); reading the snapshot opens the file at that count.

Reads formats 1 (flat indexes, before the log) to 4 (with the speech and screen spaces);
writes 4. A file that is not a consistent snapshot raises ``ValueError`` naming it.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from vifusion._files import fsync_dir
from vifusion.index._rows import DIMS
from vifusion.index._times import TimeTable
from vifusion.index._vectors import VectorStore
from vifusion.index.space import IndexPolicy, SpaceIndex
from vifusion.types import FRAME_SPACES, KIND_OF_SPACE, TEXT_SPACES, kind_of

SNAPSHOT = "snapshot.npz"
_TMP_PREFIX = ".snapshot-"
_TMP_SUFFIX = ".tmp"
_FORMAT = 4  # 4: the speech and screen spaces (older snapshots load with them empty)


@dataclass
class Loaded:
    """What a snapshot holds, ready for a shard to take over."""

    spaces: dict[str, SpaceIndex]
    times: TimeTable
    seen: list[str]
    seq: int
    size: int  # bytes of the file
    vector_rows: dict[str, int]  # per compressed space: its vector file's rows


def pack(
    shard_no: int, seq: int, times: TimeTable, seen: list[str], spaces: dict[str, SpaceIndex]
) -> dict:
    """The arrays of a snapshot (taken under the shard's lock, written outside it)."""
    ids, flat = times.arrays()
    parts = {
        "format": np.int64(_FORMAT),
        "shard": np.int64(shard_no),
        "seq": np.int64(seq),
        "ids": ids,
        "times": flat,
        "batches": np.array(seen, dtype=np.str_),
    }
    for space, sp in spaces.items():
        blobs = sp.serialize()
        parts[space] = np.concatenate(blobs)
        parts[f"{space}_blobs"] = np.array([len(b) for b in blobs], np.int64)
        parts[f"{space}_factory"] = np.str_(sp.factory)
        parts[f"{space}_trained"] = np.int64(sp.trained_n)
        if sp.store is not None:
            map_ids, map_rows = sp.store.ids.arrays()
            parts[f"{space}_vrows"] = np.int64(sp.store.rows)
            parts[f"{space}_map_ids"] = map_ids
            parts[f"{space}_map_rows"] = map_rows
    return parts


def vector_rows(parts: dict) -> dict[str, int]:
    """The vector file rows a packed snapshot counts, per compressed space."""
    return {k[: -len("_vrows")]: int(v) for k, v in parts.items() if k.endswith("_vrows")}


def write(directory: Path, parts: dict) -> int:
    """Write ``parts`` as ``directory/SNAPSHOT`` atomically; return the file's size in bytes."""
    return _write(directory, lambda f: np.savez(f, **parts))


def install(directory: Path, data: bytes) -> int:
    """Write another replica's snapshot file (its bytes) as ``directory/SNAPSHOT``, atomically;
    return its size. ``read`` checks it as it checks any snapshot."""
    return _write(directory, lambda f: f.write(data))


def _write(directory: Path, fill: Callable[[BinaryIO], object]) -> int:
    path = directory / SNAPSHOT
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=_TMP_PREFIX, suffix=_TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(directory)
    return path.stat().st_size


def read(path: Path, policy: IndexPolicy, stores: dict[str, VectorStore]) -> Loaded:
    """Load a snapshot, checking that every space holds exactly the ids of its kind; a
    compressed space takes its store from ``stores``, opened at the rows counted here
    (``VectorFileDamaged`` where the file lacks some)."""
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path}: not a shard snapshot (not an .npz archive)")
    with np.load(path, allow_pickle=False) as z:
        missing = {"format", "ids", "times", *FRAME_SPACES} - set(z.files)
        if missing:
            raise ValueError(f"{path}: not a shard snapshot (missing {sorted(missing)})")
        fmt = int(z["format"])
        if fmt not in (1, 2, 3, _FORMAT):
            raise ValueError(f"{path}: snapshot format {fmt}, expected {_FORMAT}")
        if fmt >= 4 and (missing := set(TEXT_SPACES) - set(z.files)):
            raise ValueError(f"{path}: not a shard snapshot (missing {sorted(missing)})")
        spaces = {}
        rows = {}
        for space, d in DIMS.items():
            if space not in z.files:  # before format 4: no text rows yet
                spaces[space] = SpaceIndex(d, policy)
                continue
            # Format 1 (before the log) held flat indexes only.
            factory = str(z[f"{space}_factory"]) if fmt >= 2 else "IDMap2,Flat"
            trained = int(z[f"{space}_trained"]) if fmt >= 2 else 0
            blob = z[space]
            # Format 3 holds a flat space as one blob per chunk, end to end.
            sizes = z[f"{space}_blobs"].tolist() if f"{space}_blobs" in z.files else [len(blob)]
            if sum(sizes) != len(blob):
                raise ValueError(f"{path}: {space} index blobs do not add up")
            blobs = np.split(blob, np.cumsum(sizes)[:-1])
            store = None
            if f"{space}_vrows" in z.files:
                store = stores[space]
                rows[space] = int(z[f"{space}_vrows"])
                cut = store.open_at(rows[space], z[f"{space}_map_ids"], z[f"{space}_map_rows"])
                if cut:
                    print(f"{store.path}: cut {cut} rows past the snapshot's", flush=True)
            try:
                spaces[space] = SpaceIndex.deserialize(blobs, d, policy, factory, trained, store)
            except RuntimeError as e:  # FAISS reports a bad index blob as RuntimeError
                raise ValueError(f"{path}: unreadable {space} index: {e}") from e
            except ValueError as e:
                raise ValueError(f"{path}: {space} {e}") from e
        ids, times = z["ids"], z["times"]
        seq = int(z["seq"]) if fmt >= 2 else 0
        seen = z["batches"].tolist() if fmt >= 2 else []
    kinds = kind_of(ids)
    for space, sp in spaces.items():
        if not np.array_equal(np.sort(sp.all_ids()), np.sort(ids[kinds == KIND_OF_SPACE[space]])):
            raise ValueError(f"{path}: {space} index ids do not match the stored times")
    table = TimeTable.from_arrays(ids, times)
    return Loaded(spaces, table, seen, seq, path.stat().st_size, rows)


def remove_stray_temps(directory: Path) -> None:
    """Delete temp files a crash mid-snapshot left, never renamed into place."""
    for p in directory.glob(f"{_TMP_PREFIX}*{_TMP_SUFFIX}"):
        p.unlink(missing_ok=True)
