"""File-system helpers shared by the stages that write to disk: durability, and telling a
full or read-only data dir apart from other failures."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

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
