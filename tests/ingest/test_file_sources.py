"""``file://`` sources are opened once, as regular files, and read through that descriptor: a
path swapped after its check for a symlink, a FIFO or a device is refused, not followed,
by the check, the job's hash and the decoder. Real files, FIFOs and device nodes."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from tests.media import tiny_frames
from vifusion._files import NotRegularFile, open_regular
from vifusion.catalog import Catalog, open_catalog
from vifusion.config import Config
from vifusion.extract.decode import DecodeError, open_sampled
from vifusion.ingest.sources import SourceError, resolve_file_uri

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")


@pytest.fixture
def root(tmp_path) -> Path:
    root = tmp_path / "videos"
    (root / "sub").mkdir(parents=True)
    tiny_frames(root / "sub" / "clip.mp4", 40, 10)  # 4 s
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "clip.mp4").write_bytes(b"a secret outside the ingest roots")
    return root


def _refused(uri: str, root: Path) -> SourceError:
    with pytest.raises(SourceError) as e:
        resolve_file_uri(uri, [root])
    return e.value


def test_a_fifo_or_a_folder_under_a_root_is_refused_at_once(root):
    os.mkfifo(root / "pipe.mp4")
    (root / "folder.mp4").mkdir()
    for name, what in (("pipe.mp4", "a FIFO"), ("folder.mp4", "a folder")):
        e = _refused(
            (root / name).as_uri(), root
        )  # a FIFO opened without O_NONBLOCK would hang here
        assert (e.code, e.status) == ("not_regular_file", 400) and what in str(e), str(e)


@as_root
def test_a_device_node_under_a_root_is_refused(root):
    os.mknod(root / "zero.mp4", stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero
    e = _refused((root / "zero.mp4").as_uri(), root)
    assert (e.code, e.status) == ("not_regular_file", 400) and "a character device" in str(e), str(
        e
    )


def test_a_symlink_to_dev_zero_under_a_root_is_refused(root):
    (root / "zero.mp4").symlink_to("/dev/zero")
    assert _refused((root / "zero.mp4").as_uri(), root).code == "forbidden_path"


def _swap_for_a_symlink(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.parent.parent.parent / "outside" / "clip.mp4")


def _swap_for_a_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _swap_for_dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def _swap_the_folder(path: Path) -> None:
    """The checked file's folder becomes a symlink to a folder outside the roots holding the same name."""
    path.parent.rename(path.parent.with_name("moved"))
    path.parent.symlink_to(path.parent.parent.parent / "outside")


SWAPS = {
    "symlink": (_swap_for_a_symlink, "a symbolic link"),
    "fifo": (_swap_for_a_fifo, "a FIFO"),
    "dev-zero": (_swap_for_dev_zero, "a symbolic link"),
    "folder": (_swap_the_folder, "a symbolic link"),
}


@pytest.mark.parametrize("swap", list(SWAPS))
def test_a_path_swapped_after_its_check_is_refused_when_opened(root, swap):
    make, what = SWAPS[swap]
    path = resolve_file_uri((root / "sub" / "clip.mp4").as_uri(), [root])  # the check passes
    make(path)
    with pytest.raises(NotRegularFile, match=what):
        os.close(open_regular(path, follow_symlinks=False))
    with pytest.raises(DecodeError, match=what):
        open_sampled(path, 1.0, 3600, follow_symlinks=False)


def test_the_decoder_reads_the_file_it_opened_whatever_the_name_points_at_later(root):
    path = root / "sub" / "clip.mp4"
    info, total, batches = open_sampled(path, 1.0, 3600)
    _swap_for_a_fifo(path)  # after the open: the descriptor still holds the video
    assert total == 4 and sum(len(spans) for _, spans in batches) == 4


def _wait_failed(catalog: Catalog, job_id: str, timeout_s: float = 120) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = catalog.get_job(job_id)
        if job.status in ("ready", "failed"):
            return job.status
        time.sleep(0.2)
    raise TimeoutError(job_id)


def test_a_queued_file_swapped_before_its_job_runs_fails_the_job_with_the_reason(
    ray_session, tmp_path
):
    from vifusion.service import Service

    queued = {}
    cfg = Config(data_dir=tmp_path / "data")
    catalog = open_catalog(cfg)
    for swap in SWAPS:
        root = tmp_path / swap / "videos"
        (root / "sub").mkdir(parents=True)
        (tmp_path / swap / "outside").mkdir()
        (tmp_path / swap / "outside" / "clip.mp4").write_bytes(b"a secret outside the ingest roots")
        tiny_frames(root / "sub" / "clip.mp4", 40, 10)
        # What POST /v1/videos {"uri": "file://..."} stores once the check passed: the resolved path.
        path = resolve_file_uri((root / "sub" / "clip.mp4").as_uri(), [root])
        queued[swap] = catalog.add_video(str(path), "clip")
        SWAPS[swap][0](path)
    catalog.close()
    with Service(cfg) as service:
        for swap, (video_id, job_id) in queued.items():
            assert _wait_failed(service.catalog, job_id) == "failed"
            error = service.job(job_id).error
            assert "clip.mp4: cannot read" in error and SWAPS[swap][1] in error, error
            assert (
                service.video(video_id).sha256 is None
            )  # nothing was read through the swapped name
