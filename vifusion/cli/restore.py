"""`vifusion restore DEST --data-dir NEW`: a backup (``backup.py``) put back into a new or
empty data dir, every file checked against the backup's manifest (size, SHA-256) before
anything is copied; a damaged backup is refused naming the file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from vifusion.cli.backup import (
    FORMAT,
    MANIFEST,
    PG_DUMP,
    BackupError,
    pg_tool,
    refuse_non_empty,
    sha256_of,
)
from vifusion.config import Config
from vifusion.datadir import API_KEY, REPLICATION_KEY


def restore(cfg: Config, src: Path) -> dict:
    """Restore the backup in ``src`` into ``cfg.data_dir`` (new or empty); return its
    manifest. Every file is checked against the manifest before anything is copied."""
    src, data = Path(src), Path(cfg.data_dir)
    manifest = verify(src)
    refuse_non_empty(data, "restore into")
    pg = any(f["path"] == PG_DUMP for f in manifest["files"])
    if pg and cfg.catalog_url is None:
        raise BackupError(
            "this backup's catalog is a PostgreSQL dump: give the new catalog's catalog_url"
        )
    data.mkdir(parents=True, exist_ok=True)
    for f in manifest["files"]:
        if f["path"] == PG_DUMP:
            continue
        dst = data / f["path"]
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / f["path"], dst)
    for key in (API_KEY, REPLICATION_KEY):
        if (data / key).is_file():
            os.chmod(data / key, 0o600)
    if pg:
        _pg_restore(cfg.catalog_url, src / PG_DUMP)
    return manifest


def verify(src: Path) -> dict:
    """The backup's manifest, once every file it lists has its size and SHA-256; BackupError
    naming the first file that does not."""
    try:
        manifest = json.loads((Path(src) / MANIFEST).read_text())
    except FileNotFoundError:
        raise BackupError(
            f"{src}: no {MANIFEST}: not a backup, or one that did not finish"
        ) from None
    except ValueError as e:
        raise BackupError(f"{src}/{MANIFEST} is damaged: {e}") from None
    if manifest.get("format") != FORMAT:
        raise BackupError(f"{src}: backup format {manifest.get('format')}, expected {FORMAT}")
    for f in manifest["files"]:
        path = Path(src) / f["path"]
        if not path.is_file():
            raise BackupError(f"{path}: missing from the backup")
        if path.stat().st_size != f["size"]:
            raise BackupError(
                f"{path}: {path.stat().st_size} bytes, the manifest says {f['size']}: damaged"
            )
        if sha256_of(path) != f["sha256"]:
            raise BackupError(f"{path}: its SHA-256 is not the manifest's: damaged")
    return manifest


def _pg_restore(url: str, dump: Path) -> None:
    done = subprocess.run(
        [pg_tool("pg_restore"), "--no-owner", "--exit-on-error", "--dbname", url, str(dump)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise BackupError(
            f"pg_restore failed ({done.returncode}; is the new database empty?): "
            f"{done.stderr.strip()[-2000:]}"
        )


def cmd_restore(cfg: Config, src: Path, node: str | None) -> int:
    """`vifusion restore DEST --data-dir NEW [--node NAME]`: 0 done, 1 refused."""
    source = Path(src) / node if node else Path(src)
    try:
        m = restore(cfg, source)
    except BackupError as e:
        print(f"vifusion restore: {e}", file=sys.stderr)
        return 1
    print(
        f"restored {source} into {cfg.data_dir}: {len(m['files'])} files checked and copied; "
        f"{m['ready_videos']} ready video(s)"
    )
    return 0
