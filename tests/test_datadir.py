"""The data dir's one owner (vifusion/datadir.py): the names a data dir written before holds,
the writer lock every writer takes the one way (one DataDirBusy, which says who to wait
for), whether there is a catalog to read, and which media a delete may remove."""

from __future__ import annotations

import threading
import time

import pytest

from vifusion import datadir
from vifusion.catalog import open_catalog
from vifusion.config import Config
from vifusion.datadir import (
    DataDirBusy,
    has_catalog,
    models_dir,
    remove_stored_media,
    writer_lock,
)


def test_the_names_are_those_data_dirs_already_hold():
    """A data dir written by an earlier release opens as it is: each file keeps its name."""
    assert {
        "catalog.db": datadir.CATALOG_DB,
        "index": datadir.INDEX,
        "media": datadir.MEDIA,
        "thumbs": datadir.THUMBS,
        "models": datadir.MODELS,
        "codec": datadir.CODEC,
        "plan.json": datadir.PLAN,
        "plan": datadir.CALIBRATION,
        "tmp": datadir.TMP,
        "writer.lock": datadir.WRITER_LOCK,
        "service.json": datadir.SERVICE,
        "api_key": datadir.API_KEY,
        "replication_key": datadir.REPLICATION_KEY,
        "tls": datadir.TLS,
    } == {
        "catalog.db": "catalog.db",
        "index": "index",
        "media": "media",
        "thumbs": "thumbs",
        "models": "models",
        "codec": "codec",
        "plan.json": "plan.json",
        "plan": "plan",
        "tmp": "tmp",
        "writer.lock": "writer.lock",
        "service.json": "service.json",
        "api_key": "api_key",
        "replication_key": "replication_key",
        "tls": "tls",
    }


def test_every_data_dir_shares_the_users_model_cache_unless_told_otherwise(tmp_path, monkeypatch):
    """The models made from the wheels (230 MB) are made once a machine, not once a data dir;
    ``model_cache`` moves them; a user with no writable home keeps them in the data dir."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    a, b = Config(data_dir=tmp_path / "a"), Config(data_dir=tmp_path / "b")
    shared = tmp_path / "home" / ".cache" / "vifusion" / "models"
    assert models_dir(a) == models_dir(b) == shared and shared.is_dir()
    assert models_dir(Config(data_dir=a.data_dir, model_cache=tmp_path / "m")) == tmp_path / "m"
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("HOME", str(tmp_path / "file"))  # a home that is a file: no cache there
    assert models_dir(a) == a.data_dir / "models"


def test_a_second_writer_is_refused_with_who_to_wait_for(tmp_path):
    with writer_lock(tmp_path):
        with pytest.raises(DataDirBusy) as busy:
            writer_lock(tmp_path)
        with pytest.raises(DataDirBusy):  # nor may a shared holder join an exclusive one
            writer_lock(tmp_path, shared=True)
    message = str(busy.value)
    assert message.startswith(f"another vifusion process is writing to {tmp_path}")
    assert "try again when it has finished" in message
    writer_lock(tmp_path).close()  # let go: the next writer gets it


def test_shared_holders_hold_it_together_and_keep_a_writer_out(tmp_path):
    with writer_lock(tmp_path, shared=True), writer_lock(tmp_path, shared=True):
        with pytest.raises(DataDirBusy):
            writer_lock(tmp_path)


def test_a_writer_that_waits_gets_the_lock_once_the_holder_lets_go(tmp_path):
    holder = writer_lock(tmp_path)
    threading.Timer(0.3, holder.close).start()
    started = time.monotonic()
    with writer_lock(tmp_path, wait_s=30):
        assert time.monotonic() - started < 30


def test_has_catalog(tmp_path):
    cfg = Config(data_dir=tmp_path / "data")
    assert not has_catalog(cfg)  # a mistyped data dir: nothing to read, nothing made
    assert not cfg.data_dir.exists()
    open_catalog(cfg).close()  # made by its first writer
    assert has_catalog(cfg)
    assert has_catalog(Config(data_dir=tmp_path / "none", catalog_url="postgresql://db/vf"))


def test_only_media_the_data_dir_stored_is_removed(tmp_path):
    stored = tmp_path / datadir.MEDIA / ("a" * 32) / "clip.mp4"
    stored.parent.mkdir(parents=True)
    stored.write_bytes(b"upload")
    own = tmp_path / "videos" / "clip.mp4"  # indexed in place: the user's file
    own.parent.mkdir()
    own.write_bytes(b"mine")
    for media in (own, stored, None):
        remove_stored_media(tmp_path, str(media) if media else None)
    assert own.is_file()
    assert not stored.parent.exists()
