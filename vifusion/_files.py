"""File-system helpers shared by the stages that write to disk: durability, and telling a
full or read-only data dir apart from other failures."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from vifusion.datadir import TMP

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
def whole_file(dest: Path, mode: int = 0o666) -> Iterator[BinaryIO]:
    """A file to write ``dest`` through: written under a temp name beside it, fsynced,
    renamed to ``dest`` and the rename fsynced when the block ends. So once the block has
    returned, ``dest`` is on disk whole, and a crash or error before that leaves ``dest`` as it
    was (an error also removes the temp file; a crash leaves it, for `vifusion check`).
    ``mode``: the file's from its creation (less the umask), so a key is never readable by
    others, not even for a moment."""
    tmp = dest.with_name(TEMP_PREFIX + dest.name)
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(dest.parent)


def spool_dir(data_dir: Path) -> Path:
    """The data dir's folder for request bodies on their way in (an upload's file, a query
    clip), made if missing and emptied of what a crash left: on the data dir's file system,
    so that a full disk there is the data dir full (a 507), never a 500 from the system temp
    dir, which an upload would also take twice its size of. Files spooled there have no name
    (``tempfile.TemporaryFile``), so emptying it never takes one another replica is writing."""
    folder = data_dir / TMP
    make_dirs(folder)
    for leftover in folder.iterdir():
        with contextlib.suppress(OSError):
            leftover.unlink()
    return folder


class NotRegularFile(OSError):
    """A path refused before anything reads it: not a regular file, or reached through a
    symlink where none may be followed. ``strerror`` says what it is."""


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
# A folder on the way, opened only to walk on from it: O_PATH needs no read permission.
_WALK = os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_PATH", os.O_RDONLY)


def _kind(mode: int) -> str:
    return next((what for is_kind, what in _KINDS if is_kind(mode)), "not a regular file")


def open_regular(path: Path, *, follow_symlinks: bool = True) -> int:
    """A read-only descriptor of ``path``, which must be a regular file; NotRegularFile if it
    is not, FileNotFoundError if it is missing. The caller closes it.

    Whatever reads the file afterwards (hash, decoder, HTTP response) reads this descriptor,
    or ``fd_path`` of it, and never the name again: a name swapped after this check for a
    symlink, a FIFO or a device changes nothing. A FIFO is opened without blocking (and then
    refused). Without ``follow_symlinks`` no component of the path may be a symlink: for a
    path stored resolved (a ``file://`` source, checked against the ingest roots), a symlink
    in it now is a swap made after the check, and following it could leave the roots.
    """
    path = Path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if follow_symlinks:
        fd = os.open(path, flags)
    else:
        fd = _open_no_symlinks(path, flags | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(
                errno.EINVAL, f"{_kind(st.st_mode)}, not a regular file", str(path)
            )
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_no_symlinks(path: Path, flags: int) -> int:
    """Open ``path`` walking it one component at a time, each relative to the folder before
    it and none followed if it is a symlink (what openat2's RESOLVE_NO_SYMLINKS does)."""
    parts = path.parts[1:] if path.is_absolute() else path.parts
    *folders, name = parts
    at = os.open(path.anchor or ".", _WALK)
    try:
        for folder in folders:
            try:
                step = os.open(folder, _WALK, dir_fd=at)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(folder, at):
                    raise NotRegularFile(
                        errno.ELOOP,
                        f"a symbolic link in its path ({folder}), not followed",
                        str(path),
                    ) from None
                raise
            os.close(at)
            at = step
        try:
            return os.open(name, flags, dir_fd=at)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise NotRegularFile(
                    errno.ELOOP, "a symbolic link, not followed", str(path)
                ) from None
            raise
    finally:
        os.close(at)


def _is_link(name: str, at: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=at).st_mode)
    except OSError:
        return False


def fd_path(fd: int) -> str:
    """A path that opens the file ``fd`` refers to, whatever its name points at now (Linux)."""
    return f"/proc/self/fd/{fd}"


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
