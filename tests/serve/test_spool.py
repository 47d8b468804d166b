"""Request bodies on their way in (an upload's file, a query clip) are spooled in the data
dir's ``tmp`` folder, not the system temp dir: when that file system is full the client gets
the documented 507 ``insufficient_storage``, not a 500, and nothing is stored. The full file
system is a tiny tmpfs mounted over ``tmp`` under the running service (root)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests._tmpfs import tmpfs
from tests.serve.test_app import error

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("mount"), reason="needs root to mount a tmpfs"
)


@pytest.fixture
def full_spool(live):
    spool = live.cfg.data_dir / "tmp"
    spool.mkdir(exist_ok=True)  # the service made it at start
    with tmpfs(spool, "64k"):
        yield spool


def _stored(live) -> set[Path]:
    return set((live.cfg.data_dir / "media").iterdir())


def test_an_upload_meeting_a_full_spool_is_a_507_and_stores_nothing(live, full_spool):
    before, listed = _stored(live), live.vf.videos()
    video = b"\x00\x00\x00\x18ftypisom" + os.urandom(3 << 20)  # past the 1 MiB kept in memory
    r = live.client.post("/v1/videos", files={"file": ("big.mp4", video, "video/mp4")})
    message = error(r, 507, "insufficient_storage")
    assert f"the data dir {live.cfg.data_dir} is full" in message, message
    assert _stored(live) == before and live.vf.videos() == listed


def test_a_clip_search_meeting_a_full_spool_is_a_507(live, full_spool, tmp_path):
    clip = b"\x00\x00\x00\x18ftypisom" + os.urandom(512 << 10)  # under 1 MiB: spooled in memory
    r = live.client.post("/v1/search", files={"clip": ("q.mp4", clip, "video/mp4")})
    message = error(r, 507, "insufficient_storage")
    assert f"the data dir {live.cfg.data_dir} is full" in message, message
    assert live.client.post("/v1/search", json={"text": "a cat"}).status_code == 200
