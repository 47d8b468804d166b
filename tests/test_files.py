"""Telling a data dir that refuses writes apart from other failures, across processes; stored
files written whole (fsynced, under a temp name until then)."""

from __future__ import annotations

import errno
import hashlib
import os
import pickle
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from vifusion._files import TEMP_PREFIX, StorageError, storage_reason, storage_writes, whole_file
from vifusion.config import Config
from vifusion.ingest.sources import SourceError, new_media_path, save_capped


def test_storage_errors_survive_pickling_as_ray_sends_them_between_actors():
    e = pickle.loads(
        pickle.dumps(StorageError("full", "the data dir /d is full: the upload was not stored"))
    )
    assert isinstance(e, StorageError) and e.reason == "full" and "upload was not stored" in str(e)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), "full"),
        (OSError(errno.EROFS, "Read-only file system"), "read-only"),
        (sqlite3.OperationalError("database or disk is full"), "full"),
        (sqlite3.OperationalError("attempt to write a readonly database"), "read-only"),
        (OSError(errno.ENOENT, "No such file or directory"), None),
        (ValueError("not storage"), None),
    ],
)
def test_storage_reason(error, reason):
    assert storage_reason(error) == reason


def test_storage_writes_names_the_data_dir_and_the_outcome(tmp_path):
    with pytest.raises(
        StorageError, match=f"the data dir {tmp_path} is full: the video was not queued"
    ):
        with storage_writes(tmp_path, "the video was not queued"):
            raise sqlite3.OperationalError("database or disk is full")
    with pytest.raises(FileNotFoundError):  # not the disk's fault: passes through as it was
        with storage_writes(tmp_path, "the video was not queued"):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory")


def _synced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths os.fsync is called on from now, in order (each call still syncs)."""
    seen: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names open files through /proc")
def test_a_stored_upload_or_download_is_on_disk_whole_when_saving_returns(tmp_path, monkeypatch):
    """Before an upload's 202 (or a fetched file's indexing): its new folder, the file's bytes
    under the temp name, then the rename to its own name are each fsynced, in that order."""
    cfg = Config(data_dir=tmp_path / "data")
    cfg.data_dir.mkdir()
    synced = _synced(monkeypatch)
    dest = new_media_path(cfg, "clip.mp4")
    body = [b"a" * 1000, b"b" * 1000]
    assert save_capped(body, dest, 1 << 20, "the upload") == (
        hashlib.sha256(b"".join(body)).hexdigest(),
        2000,
    )
    folder = Path(os.path.realpath(dest.parent))
    assert synced == [
        str(folder.parent.parent),
        str(folder.parent),
        str(folder / f"{TEMP_PREFIX}clip.mp4"),
        str(folder),
    ]
    assert os.listdir(folder) == ["clip.mp4"] and dest.read_bytes() == b"".join(body)


_KILLED_MID_WRITE = r"""
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from vifusion.ingest.sources import save_capped

def chunks():
    yield b"x" * 4096
    print("half written", flush=True)
    time.sleep(60)
    yield b"y"

save_capped(chunks(), Path(sys.argv[1]), 1 << 20, "the upload")
"""


def test_an_upload_killed_half_way_leaves_only_a_temp_name_behind(tmp_path):
    """SIGKILL mid-file: no half file under the video's own name (which a restart would take
    for a whole one), only the temp name that `vifusion check` removes."""
    dest = tmp_path / "clip.mp4"
    root = Path(__file__).resolve().parents[1]
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_MID_WRITE, str(dest), str(root)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline() == "half written\n"
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert os.listdir(tmp_path) == [f"{TEMP_PREFIX}clip.mp4"]


def test_a_refused_or_failed_write_leaves_the_file_as_it_was_and_no_temp(tmp_path):
    dest = tmp_path / "clip.mp4"
    dest.write_bytes(b"before")
    with pytest.raises(SourceError, match="over the 10-byte limit"):
        save_capped([b"x" * 8, b"x" * 8], dest, 10, "the upload")

    def broken():
        yield b"x"
        raise OSError(errno.ECONNRESET, "Connection reset by peer")

    with pytest.raises(OSError, match="reset"):
        with whole_file(dest) as f:
            for chunk in broken():
                f.write(chunk)
    assert os.listdir(tmp_path) == ["clip.mp4"] and dest.read_bytes() == b"before"
