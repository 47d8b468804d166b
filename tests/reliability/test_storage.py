"""A data dir that fills up under a running service, or that is mounted read-only: every
write is refused with an error that says so, searches go on, nothing stored before is lost,
and acknowledged jobs finish once there is room again (no restart).

The data dir is a small tmpfs mounted for the test (root), filled to the last byte by a file."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests._tmpfs import tmpfs
from vifusion.catalog import Catalog
from vifusion.config import Config
from vifusion.samples import write_demo_set

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("mount"), reason="needs root to mount a tmpfs"
)


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    with tmpfs(mnt, "48m"):
        yield mnt


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    return {v.name: v for v in write_demo_set(tmp_path_factory.mktemp("storage-videos"))}


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk``; the returned file gives them back when removed."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


def wait_status(catalog: Catalog, job_id: str, timeout_s: float = 120) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (status := catalog.get_job(job_id).status) in ("ready", "failed"):
            return status
        time.sleep(0.3)
    return catalog.get_job(job_id).status


def files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_a_full_data_dir_refuses_writes_clearly_loses_nothing_and_resumes_when_freed(
    ray_session, small_disk, videos
):
    from vifusion.cli.check import find_drift
    from vifusion.service import Service, StorageError

    cfg = Config(
        data_dir=small_disk / "data",
        ingest_roots=(videos["kitchen.mp4"].path.parent,),
        dedup_cosine=1.01,
    )
    with Service(cfg) as svc:
        kitchen = svc.ingest_uri(videos["kitchen.mp4"].path.as_uri())
        assert wait_status(svc.catalog, kitchen.job_id) == "ready"
        # Acknowledged, then the disk fills while its frames are still being embedded.
        street_job = svc.ingest_uri(videos["street.mp4"].path.as_uri()).job_id
        filler = fill(small_disk)
        for refused in (
            lambda: svc.ingest_uri(videos["launch.mp4"].path.as_uri()),
            lambda: svc.ingest_upload(
                io.BytesIO(videos["launch.mp4"].path.read_bytes()), "launch.mp4"
            ),
            lambda: svc.delete(kitchen.video_id),
        ):
            with pytest.raises(StorageError, match=f"the data dir {cfg.data_dir} is full"):
                refused()
        assert not files_under(cfg.data_dir / "media")  # no half-written upload left taking space
        hits = svc.search(text="a cat", top_k=3).results
        assert hits and hits[0].video_id == kitchen.video_id  # the refused delete deleted nothing
        time.sleep(3)  # the job has met the full disk and been put aside
        assert svc.catalog.get_job(street_job).status != "ready"

        filler.unlink()
        status = wait_status(svc.catalog, street_job)  # resumed without a restart, each frame once
        assert status == "ready", svc.catalog.get_job(street_job).error
        assert svc.health()["vectors"] == 24
        launch = svc.ingest_uri(videos["launch.mp4"].path.as_uri())
        assert wait_status(svc.catalog, launch.job_id) == "ready"
        assert svc.search(text="a rocket", top_k=1).results[0].video_id == launch.video_id
        assert find_drift(svc.catalog, svc.shards) == []


def test_a_service_started_on_a_full_data_dir_says_so(ray_session, small_disk, videos):
    from vifusion.service import Service, StorageError

    cfg = Config(data_dir=small_disk / "data")
    with Service(cfg):
        pass
    filler = fill(small_disk)
    with pytest.raises(StorageError, match=f"the data dir {cfg.data_dir} is full"):
        Service(cfg)
    filler.unlink()
    with Service(cfg) as svc:  # and starts once there is room
        assert svc.health()["status"] == "ok"


def remount(disk: Path, mode: str) -> None:
    # The actors of the run before may take a moment to close their files.
    for _ in range(50):
        if (
            subprocess.run(
                ["mount", "-o", f"remount,{mode}", str(disk)], capture_output=True, check=False
            ).returncode
            == 0
        ):
            return
        time.sleep(0.2)
    raise RuntimeError(f"cannot remount {disk} {mode}")


@pytest.mark.slow
def test_a_read_only_data_dir_is_searched_and_refuses_writes_with_a_clear_error_left_untouched(
    ray_session, small_disk, videos, capsys
):
    from vifusion.cli import parser as cli

    data = small_disk / "data"
    assert (
        cli.main(["index", "--quiet", "--data-dir", str(data), str(videos["kitchen.mp4"].path)])
        == 0
    )
    remount(small_disk, "ro")
    try:
        before = {p: p.read_bytes() for p in files_under(data)}
        capsys.readouterr()
        assert (
            cli.main(["index", "--quiet", "--data-dir", str(data), str(videos["street.mp4"].path)])
            == 2
        )
        said = capsys.readouterr().err
        assert f"the data dir {data} cannot be written" in said and "Traceback" not in said
        # a search only reads: it answers from a read-only mount
        assert cli.main(["search", "--data-dir", str(data), "--top-k", "1", "--json", "a cat"]) == 0
        found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [r["title"] for r in found] == ["kitchen"]
        assert {p: p.read_bytes() for p in files_under(data)} == before
    finally:
        remount(small_disk, "rw")
    assert cli.main(["check", "--data-dir", str(data)]) == 0


@pytest.mark.slow
def test_the_cli_on_a_full_data_dir_says_so_and_exits_2(ray_session, small_disk, videos, capsys):
    from vifusion.cli import parser as cli

    data = small_disk / "data"
    assert (
        cli.main(["index", "--quiet", "--data-dir", str(data), str(videos["kitchen.mp4"].path)])
        == 0
    )
    filler = fill(small_disk)
    assert (
        cli.main(["index", "--quiet", "--data-dir", str(data), str(videos["street.mp4"].path)]) == 2
    )
    said = capsys.readouterr().err
    assert (
        f"the data dir {data} is full" in said
        and "run the same command again" in said
        and "Traceback" not in said
    )
    filler.unlink()
    assert (
        cli.main(["index", "--quiet", "--data-dir", str(data), str(videos["street.mp4"].path)]) == 0
    )
    assert cli.main(["check", "--data-dir", str(data)]) == 0
