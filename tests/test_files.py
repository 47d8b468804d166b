"""Telling a data dir that refuses writes apart from other failures, across processes."""

from __future__ import annotations

import errno
import pickle
import sqlite3

import pytest

from vifusion._files import StorageError, storage_reason, storage_writes


def test_storage_errors_survive_pickling_as_ray_sends_them_between_actors():
    e = pickle.loads(pickle.dumps(StorageError("full", "the data dir /d is full: the upload was not stored")))
    assert isinstance(e, StorageError) and e.reason == "full" and "upload was not stored" in str(e)


@pytest.mark.parametrize(("error", "reason"), [
    (OSError(errno.ENOSPC, "No space left on device"), "full"),
    (OSError(errno.EROFS, "Read-only file system"), "read-only"),
    (sqlite3.OperationalError("database or disk is full"), "full"),
    (sqlite3.OperationalError("attempt to write a readonly database"), "read-only"),
    (OSError(errno.ENOENT, "No such file or directory"), None),
    (ValueError("not storage"), None),
])
def test_storage_reason(error, reason):
    assert storage_reason(error) == reason


def test_storage_writes_names_the_data_dir_and_the_outcome(tmp_path):
    with pytest.raises(StorageError, match=f"the data dir {tmp_path} is full: the video was not queued"):
        with storage_writes(tmp_path, "the video was not queued"):
            raise sqlite3.OperationalError("database or disk is full")
    with pytest.raises(FileNotFoundError):  # not the disk's fault: passes through as it was
        with storage_writes(tmp_path, "the video was not queued"):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory")
