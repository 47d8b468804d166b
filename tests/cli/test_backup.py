"""`vifusion backup` and `vifusion restore` on real data dirs: real SQLite (and PostgreSQL
where its binaries are), real shards written by `vifusion index` or a live writer, real files."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import numpy as np

from tests.fusion._frames import frames
from vifusion.catalog import open_catalog
from vifusion.cli import parser as cli
from vifusion.cli.backup import MANIFEST
from vifusion.config import Config
from vifusion.index.layout import check_layout, shard_dir
from vifusion.index.local import LocalShards
from vifusion.index.shard import Shard


def ready_ids(cfg: Config) -> set[int]:
    catalog = open_catalog(cfg, read_only=True)
    try:
        return catalog.ready_ids()
    finally:
        catalog.close()


def found_by_its_own_frame(cfg: Config, video_id: int) -> bool:
    """A visual search of the data dir's shards with one of the video's stored frames finds it."""
    shards = LocalShards(cfg)
    _, vectors = shards.frames("visual", video_id, 0, 1e9, limit=1)
    hits = shards.search("visual", vectors, 3)[0]
    return bool(hits) and hits[0].video_id == video_id


def test_backup_then_restore_into_a_new_data_dir(indexed_copy, tmp_path, capsys):
    data, _ = indexed_copy
    cfg = Config(data_dir=data)
    ready = sorted(ready_ids(cfg))
    assert len(ready) >= 2
    dest = tmp_path / "backup"

    assert cli.main(["backup", str(dest), "--data-dir", str(data)]) == 0
    manifest = json.loads((dest / MANIFEST).read_text())
    names = {f["path"] for f in manifest["files"]}
    assert "catalog.db" in names and any(n.endswith("snapshot.npz") or ".log" in n for n in names)
    shutil.rmtree(data)  # the disk is lost
    new = tmp_path / "new"
    capsys.readouterr()

    assert cli.main(["restore", str(dest), "--data-dir", str(new)]) == 0
    assert cli.main(["check", "--data-dir", str(new)]) == 0
    assert "consistent:" in capsys.readouterr().out
    restored = Config(data_dir=new)
    assert sorted(ready_ids(restored)) == ready
    assert all(found_by_its_own_frame(restored, v) for v in ready)


def test_a_damaged_backup_is_refused_naming_the_file(indexed_copy, tmp_path, capsys):
    data, _ = indexed_copy
    dest = tmp_path / "backup"
    assert cli.main(["backup", str(dest), "--data-dir", str(data)]) == 0
    files = json.loads((dest / MANIFEST).read_text())["files"]
    shard_log = dest / next(f["path"] for f in files if f["path"].endswith(".log"))
    raw = bytearray(shard_log.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # one byte flipped, the size kept
    shard_log.write_bytes(bytes(raw))
    new = tmp_path / "new"
    capsys.readouterr()

    assert cli.main(["restore", str(dest), "--data-dir", str(new)]) == 1
    err = capsys.readouterr().err
    assert str(shard_log) in err and "damaged" in err
    assert not new.exists()  # nothing copied


def test_restore_into_a_non_empty_data_dir_is_refused(indexed_copy, tmp_path, capsys):
    data, _ = indexed_copy
    dest = tmp_path / "backup"
    assert cli.main(["backup", str(dest), "--data-dir", str(data)]) == 0
    capsys.readouterr()

    assert cli.main(["restore", str(dest), "--data-dir", str(data)]) == 1
    assert "not empty" in capsys.readouterr().err


def test_a_backup_taken_while_a_writer_appends_holds_what_was_acknowledged(tmp_path):
    """A writer adds videos (vectors synced, then the job marked ready) with snapshots
    between, while the backup runs: the restore holds every video acknowledged before the
    backup began, and its catalog and shard agree (a video in flight is in neither)."""
    cfg = Config(data_dir=tmp_path / "data", num_shards=1, snapshot_log_bytes=64 << 10)
    check_layout(cfg.data_dir, 1)
    catalog = open_catalog(cfg)
    shard = Shard(0, shard_dir(cfg.data_dir, 0), cfg, writer=True)
    acknowledged: list[int] = []
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            video_id, job_id = catalog.add_video(f"/v/{len(acknowledged)}.mp4", "v")
            shard.add(frames(video_id, 40))
            catalog.update_job(job_id, "ready", frames_indexed=40)
            acknowledged.append(video_id)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while len(acknowledged) < 20:
            stop.wait(0.01)
        before = list(acknowledged)
        assert cli.main(["backup", str(tmp_path / "bk"), "--data-dir", str(cfg.data_dir)]) == 0
    finally:
        stop.set()
        thread.join()
    catalog.close()
    assert len(acknowledged) > len(before)  # the writer went on through the backup
    new = Config(data_dir=tmp_path / "new", num_shards=1)

    assert cli.main(["restore", str(tmp_path / "bk"), "--data-dir", str(new.data_dir)]) == 0
    ready = ready_ids(new)
    held = set(Shard(0, shard_dir(new.data_dir, 0), new, writer=False).video_ids())
    assert set(before) <= ready
    assert held == ready
    for v in (before[0], before[-1]):
        shards = LocalShards(new)
        _, vectors = shards.frames("visual", v, 0, 1e9)
        np.testing.assert_allclose(vectors, frames(v, 40).features[:, : vectors.shape[1]])


def test_backup_and_restore_a_postgresql_catalog(postgres_url, tmp_path):
    """The catalog on PostgreSQL: pg_dump into the backup, pg_restore into a new database."""
    from tests._postgres import CatalogPlace

    source = CatalogPlace("postgres", tmp_path, postgres_url)
    target = CatalogPlace("postgres", tmp_path, postgres_url)
    try:
        cfg = Config(data_dir=tmp_path / "data", num_shards=1, catalog_url=source.url)
        check_layout(cfg.data_dir, 1)
        catalog = source.open()
        shard = Shard(0, shard_dir(cfg.data_dir, 0), cfg, writer=True)
        for n in range(3):
            video_id, job_id = catalog.add_video(f"/v/{n}.mp4", "v")
            shard.add(frames(video_id, 8))
            catalog.update_job(job_id, "ready", frames_indexed=8)
        dest = tmp_path / "bk"
        args = ["--data-dir", str(cfg.data_dir), "--config", _config_file(tmp_path, source.url)]
        assert cli.main(["backup", str(dest), *args]) == 0
        assert (dest / "catalog.pgdump").is_file() and not (dest / "catalog.db").exists()
        new = tmp_path / "new"
        args = ["--data-dir", str(new), "--config", _config_file(tmp_path, target.url)]

        assert cli.main(["restore", str(dest), *args]) == 0
        assert target.open(read_only=True).ready_ids() == catalog.ready_ids()
        assert len(catalog.ready_ids()) == 3
        restored = Config(data_dir=new, num_shards=1, catalog_url=target.url)
        assert set(Shard(0, shard_dir(new, 0), restored, writer=False).video_ids()) == (
            catalog.ready_ids()
        )
    finally:
        source.close()
        target.close()


def _config_file(tmp_path: Path, url: str) -> str:
    path = tmp_path / f"config-{url.rsplit('/', 1)[1]}.json"
    path.write_text(json.dumps({"catalog_url": url, "num_shards": 1}))
    return str(path)
