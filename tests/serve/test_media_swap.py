"""``/media`` and thumbnails read a video from a descriptor checked to be a regular file: a ``file://``
video whose path is swapped afterwards for a symlink or a FIFO is a 404, never the file the
name points at now (and never a request that hangs)."""

from __future__ import annotations

import os

import pytest

from tests.serve.test_app import error


@pytest.mark.parametrize("swap", ["symlink", "fifo"])
def test_a_file_uri_video_swapped_after_indexing_is_not_served(live, tmp_path, swap):
    video_id = live.ids["launch.mp4"]  # ingested as a file:// uri
    path = live.videos["launch.mp4"].path
    secret = tmp_path / "secret.mp4"
    secret.write_bytes(b"a secret outside the ingest roots" * 100)
    kept = path.with_name("launch.kept")
    os.replace(path, kept)
    try:
        if swap == "symlink":
            path.symlink_to(secret)
        else:
            os.mkfifo(path)
        why = "a symbolic link" if swap == "symlink" else "a FIFO"
        message = error(live.client.get(f"/v1/videos/{video_id}/media"), 404, "not_found")
        assert why in message, message
        # a thumbnail not cached yet decodes the checked file too, never the swapped name
        message = error(
            live.client.get(f"/v1/videos/{video_id}/thumbnail", params={"t": 1.7}), 404, "not_found"
        )
        assert why in message, message
    finally:
        path.unlink()
        os.replace(kept, path)
    whole = live.client.get(f"/v1/videos/{video_id}/media")
    assert whole.status_code == 200 and whole.content == path.read_bytes()
