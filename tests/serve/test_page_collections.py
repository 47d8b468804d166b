"""The web page's collection picker in a real browser (as tests/serve/test_page.py, whose
browser and helpers it uses): filled from GET /v1/collections once the key is known, and a
search sends the chosen collection and shows only its videos."""

from __future__ import annotations

from tests.serve.test_page import (  # noqa: F401
    browser,
    page,
    picker_with,
    search_picked,
    shown_videos,
)

from .conftest import KEY


def test_the_picker_lists_collections_and_a_search_looks_in_the_chosen_one(page, live):  # noqa: F811
    r = live.client.post(
        "/v1/videos",
        json={"uri": live.videos["launch.mp4"].path.as_uri(), "collection": "page-a"},
    )
    assert r.status_code == 202, r.text
    mine = r.json()["video_id"]
    try:
        assert live.vf.wait(r.json()["job_id"], timeout_s=300)["status"] == "ready"
        options = picker_with(page, KEY, "collection", "page-a")
        assert options[0] == "" and {"default", "page-a"} <= set(options)
        search_picked(page, "collection", "page-a", "collections")
        assert shown_videos(page) == {str(mine)}
    finally:
        live.client.delete("/v1/collections/page-a")
