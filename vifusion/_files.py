"""File-system helpers shared by the stages that write to disk: durability, and telling a
full or read-only data dir apart from other failures."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)
_NEARLY_FULL = 1 << 20  # bytes free under which a vague I/O error is taken for a full disk


class StorageError(OSError):
    """The data dir refused a write (full, over quota, read-only). What was on disk before is
    intact; the operation that hit it did not happen. ``reason``: 'full' or 'read-only'."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self):  # it crosses Ray actors: rebuild it from both arguments
        return type(self), (self.reason, str(self))


def fsync_dir(directory: Path) -> None:
    """Make a rename or unlink in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(directory: Path) -> None:
    """``mkdir -p`` whose new folders survive a crash: each one's parent is fsynced."""
    missing = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    for d in reversed(missing):
        d.mkdir(exist_ok=True)
        fsync_dir(d.parent)


# The name a file is written under until it is whole (see ``whole_file``). Stored names never
# begin with a dot, so nothing else carries it: `vifusion check` removes what a crash left.
TEMP_PREFIX = ".part-"


@contextlib.contextmanager
def whole_file(dest: Path) -> Iterator[BinaryIO]:
    """A file to write ``dest`` through: written under a temp name beside it, fsynced,
    renamed to ``dest`` and the rename fsynced when the block ends. So once the block has
    returned, ``dest`` is on disk whole, and a crash or error before that leaves ``dest`` as it
    was (an error also removes the temp file; a crash leaves it, for `vifusion check`)."""
    tmp = dest.with_name(TEMP_PREFIX + dest.name)
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(dest.parent)


def storage_reason(e: BaseException) -> str | None:
    """'full' or 'read-only' where ``e`` is the data dir refusing a write, else None. Looks
    through Ray's wrapper of an actor's error (``cause``: the errno survives only there)."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException) and cause is not e:
        return storage_reason(cause)
    if isinstance(e, StorageError):
        return e.reason
    if isinstance(e, sqlite3.OperationalError):
        text = str(e)
        if "disk is full" in text:
            return "full"
        if "readonly" in text or "read-only" in text:
            return "read-only"
        return None
    if isinstance(e, OSError):
        if e.errno in _FULL:
            return "full"
        if e.errno in _READ_ONLY:
            return "read-only"
    return None


def _disk_state(data_dir: Path, e: BaseException) -> str | None:
    # SQLite says only "disk I/O error" or "unable to open database file" when it cannot
    # create its -wal/-shm files: ask the file system what it is.
    if isinstance(e, sqlite3.OperationalError):
        with contextlib.suppress(OSError):
            st = os.statvfs(data_dir)
            if st.f_flag & os.ST_RDONLY:
                return "read-only"
            if st.f_bavail * st.f_frsize < _NEARLY_FULL:
                return "full"
    return None


@contextlib.contextmanager
def storage_writes(data_dir: Path, outcome: str) -> Iterator[None]:
    """Re-raise the data dir refusing a write as a StorageError that says so and what came
    of it (``outcome``: "the upload was not stored")."""
    try:
        yield
    except StorageError:
        raise
    except (OSError, sqlite3.OperationalError) as e:
        reason = storage_reason(e) or _disk_state(data_dir, e)
        if reason is None:
            raise
        raise StorageError(reason, f"the data dir {data_dir} is {reason}: {outcome} ({e})") from e
