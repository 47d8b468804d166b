"""Replication records sealed with a MAC, as the shard stream's batches are.

A follower logs what the primary sends it (a write, or the records and snapshot it lacks)
and acknowledges it: a record changed on the way would be an acknowledged write that no
replica really holds. A CRC finds a flipped bit, not a change made on purpose; so each write
carries an HMAC-SHA256 over its seq and payload, and each catch-up over everything in it,
under a key that never travels with them. A follower refuses what fails (``Tampered``):
nothing of it is logged, and the sender tries again.

The key is the data dir's (``DATA_DIR/replication_key``, made once, mode 0600), read where
the shard replicas are started (on the head, beside the catalog) and handed to each as it is
created, as the shard stream's secret is: over Ray, which on a cluster runs under mutual TLS
(deploy/tls.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import struct
from pathlib import Path

from vifusion.datadir import REPLICATION_KEY
from vifusion.index._loading import Changes


class Tampered(ValueError):
    """A replication record whose MAC does not match: changed on the way, or not from a
    replica of this data dir. Not applied."""


def data_dir_key(data_dir: Path) -> bytes:
    """The data dir's replication key, made on first use. Two starts at once both read the
    first one written: the key file appears whole (a hard link of a finished temp file)."""
    path = Path(data_dir) / REPLICATION_KEY
    with contextlib.suppress(FileNotFoundError):
        return bytes.fromhex(path.read_text().strip())
    tmp = path.with_name(f".{REPLICATION_KEY}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)  # fails where another start got there first: its key stands
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return bytes.fromhex(path.read_text().strip())


class Seal:
    """MACs over replication records under one key."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("a replication key has at least 16 bytes")
        self._key = key

    def record(self, seq: int, payload: bytes) -> bytes:
        """The MAC of write ``seq`` carrying ``payload`` (``wal.encode`` of the operation)."""
        mac = hmac.new(self._key, b"write", hashlib.sha256)
        mac.update(struct.pack("<QQ", seq, len(payload)))
        mac.update(payload)
        return mac.digest()

    def check_record(self, seq: int, payload: bytes, tag: bytes) -> None:
        if not hmac.compare_digest(self.record(seq, payload), tag):
            raise Tampered(f"write {seq}: its MAC does not match: not applied")

    def changes(self, changes: Changes) -> bytes:
        """The MAC of a catch-up: its base, reset flag, every record, the snapshot and the
        vector files that go with it."""
        mac = hmac.new(self._key, b"changes", hashlib.sha256)
        mac.update(struct.pack("<QB", changes.base_seq, changes.reset))
        for seq, payload in changes.records:
            mac.update(struct.pack("<QQ", seq, len(payload)))
            mac.update(payload)
        if changes.snapshot is not None:
            mac.update(struct.pack("<Q", len(changes.snapshot)))
            mac.update(changes.snapshot)
        for space, data in sorted((changes.vectors or {}).items()):
            mac.update(struct.pack("<Q", len(data)) + space.encode())
            mac.update(data)
        return mac.digest()

    def check_changes(self, changes: Changes, tag: bytes) -> None:
        if not hmac.compare_digest(self.changes(changes), tag):
            raise Tampered(
                f"changes after seq {changes.base_seq} ({len(changes.records)} records): "
                "their MAC does not match: not installed"
            )
