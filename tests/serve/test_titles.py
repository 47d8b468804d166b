"""Titles are kept as the client gave them; only the stored file's name is made safe."""

from __future__ import annotations

import pytest

from tests.serve.test_app import error

NOISE = bytes(range(256)) * 16  # binary, no known signature: accepted, and its job fails at decode


def assert_titled(live, r, title: str) -> None:
    """The ingest ``r`` was accepted and its video is titled ``title``; it is deleted after its job ends."""
    assert r.status_code == 202, r.text
    video_id = r.json()["video_id"]
    try:
        assert live.client.get(f"/v1/videos/{video_id}").json()["title"] == title
        live.vf.wait(r.json()["job_id"])
    finally:
        assert live.client.delete(f"/v1/videos/{video_id}").status_code == 204


@pytest.mark.parametrize(
    "title", ["Dr. Who", "AC/DC live", "..\\..\\etc", "  spaced  ", "視頻" * 100]
)
def test_a_given_title_is_kept_as_given(live, title):
    r = live.client.post("/v1/videos", files={"file": ("x.mkv", NOISE)}, data={"title": title})
    assert_titled(live, r, title)
    noise = live.root / "videos" / "noise.mkv"  # in the ingest root
    noise.write_bytes(NOISE)
    r = live.client.post("/v1/videos", json={"uri": noise.as_uri(), "title": title})
    assert_titled(live, r, title)


@pytest.mark.parametrize(
    ("filename", "title"),
    [
        ("Dr. Who.mkv", "Dr. Who"),
        ("C:\\clips\\AC-DC live.mkv", "AC-DC live"),
        ("Dr. Who", "Dr. Who"),  # no extension: nothing to cut
        ("archive.tar.mkv", "archive.tar"),
    ],
)
def test_a_title_taken_from_the_file_name_drops_only_the_folder_and_the_extension(
    live, filename, title
):
    r = live.client.post("/v1/videos", files={"file": (filename, NOISE)})
    assert_titled(live, r, title)


def test_a_title_over_the_cap_is_a_422(live):
    from vifusion.ingest.sources import MAX_TITLE_CHARS

    long = "t" * (MAX_TITLE_CHARS + 1)
    r = live.client.post("/v1/videos", files={"file": ("x.mkv", NOISE)}, data={"title": long})
    assert "title" in error(r, 422)
    r = live.client.post(
        "/v1/videos", json={"uri": live.videos["launch.mp4"].path.as_uri(), "title": long}
    )
    assert "title" in error(r, 422)
