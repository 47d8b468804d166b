"""The data dir: where each of its files lives, its writer lock, and what it says of itself.

Every path under ``DATA_DIR`` is named here and nowhere else, so a reader finds the whole
layout in one place and a rename cannot miss a reader. The names are those every earlier
release wrote: a data dir written before opens as it is.

The writer lock (an flock on ``DATA_DIR/writer.lock``) keeps apart the processes that write
the data dir's files each through actors or files of their own: `vifusion index`,
`vifusion check --repair`, `vifusion delete` without a service, and a service. Taken
exclusively, a second such process is refused (``DataDirBusy``); taken shared (API replicas
on one Ray, which write only through shared actors), any number hold it together and still
keep the others out. ``runtime.Runtime`` says who takes it which way.
"""

from __future__ import annotations

import fcntl
import shutil
import time
from pathlib import Path
from typing import IO

from vifusion.config import Config

# Files and folders directly under the data dir.
CATALOG_DB = "catalog.db"  # the SQLite catalog (where no catalog_url is set)
INDEX = "index"  # the shards and their count (``index/layout.py``)
MEDIA = "media"  # media the data dir stored (uploads, downloads): media/<32 hex>/<name>
THUMBS = "thumbs"  # the thumbnail cache: thumbs/<video id>/
MODELS = "models"  # the model cache where the user's cannot be written (``models_dir``)
CODEC = "codec"  # the adaptive codec's trained tables
PLAN = "plan.json"  # the applied placement plan (`vifusion plan --apply`)
CALIBRATION = "plan"  # `vifusion plan`'s cached stage measurements
TMP = "tmp"  # request bodies on their way in (``_files.spool_dir``)
WRITER_LOCK = "writer.lock"
SERVICE = "service.json"  # where a running `vifusion serve` answers (``cluster/running.py``)
API_KEY = "api_key"  # the REST API key, made on a service's first start
REPLICATION_KEY = "replication_key"  # seals records between a shard's replicas
TLS = "tls"  # the self-signed certificate made for this host
SAMPLES = "samples"  # `vifusion demo`'s downloaded sample videos


def has_catalog(cfg: Config) -> bool:
    """Whether there is a catalog to read: a catalog server, or the data dir's SQLite file.
    A reader checks first, so that a mistyped data dir is said as such, not made empty."""
    return cfg.catalog_url is not None or (cfg.data_dir / CATALOG_DB).is_file()


def remove_stored_media(data_dir: Path, media: str | None) -> None:
    """Remove a deleted video's media file (``Video.media``) where the data dir stored it (an
    upload, a download): a file indexed in place is the user's, and stays."""
    if media and Path(media).parent.parent == Path(data_dir) / MEDIA:
        shutil.rmtree(Path(media).parent, ignore_errors=True)


def models_dir(cfg: Config) -> Path:
    """Where models made from the installed wheels are kept (``cfg.model_cache``): by default
    the user's cache, so that every data dir on the machine shares one copy (230 MB, made once);
    the data dir's own ``models`` where the user's cache cannot be made (a service user with
    no home)."""
    if cfg.model_cache is not None:
        return cfg.model_cache
    shared = Path.home() / ".cache" / "vifusion" / "models"
    try:
        shared.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError):  # RuntimeError: no home to be found
        return cfg.data_dir / MODELS
    return shared


# -- the writer lock -------------------------------------------------------------------


class DataDirBusy(RuntimeError):
    """Another process holds the data dir's writer lock."""


class DataDirUnwritable(ValueError):
    """The data dir cannot be written (read-only mount, permissions): nothing is touched."""


def check_writable(data_dir: Path) -> None:
    """DataDirUnwritable where the data dir cannot be written; makes it where missing."""
    _open_lock_file(data_dir).close()


def writer_lock(data_dir: Path, *, shared: bool = False, wait_s: float = 0.0) -> IO[str]:
    """Take the data dir's writer lock, exclusively or ``shared``; the lock file is returned
    and held until it is closed. ``wait_s``: how long to wait for another holder to let go
    (a service replica being replaced hands over to its successor this way); DataDirBusy
    after that, DataDirUnwritable where the data dir cannot be written."""
    lock = _open_lock_file(data_dir)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(lock, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            return lock
        except BlockingIOError:
            if time.monotonic() >= deadline:
                lock.close()
                raise DataDirBusy(
                    f"another vifusion process is writing to {data_dir} (an index run, "
                    "`vifusion check --repair`, or a service that did not announce itself "
                    f"in {SERVICE}); try again when it has finished"
                ) from None
            time.sleep(0.2)


def _open_lock_file(data_dir: Path) -> IO[str]:
    """The lock file, opened (not locked), the data dir made where missing; DataDirUnwritable
    where it cannot be written, before anything in it is touched."""
    try:
        Path(data_dir).mkdir(parents=True, exist_ok=True)
        return open(Path(data_dir) / WRITER_LOCK, "w")
    except OSError as e:
        raise DataDirUnwritable(
            f"the data dir {data_dir} cannot be written: {e.strerror}"
        ) from None
