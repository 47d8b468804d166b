"""The web page's collection picker in a real browser (as tests/serve/test_page.py, whose
browser and helpers it uses): filled from GET /v1/collections once the key is known, and a
search sends the chosen collection and shows only its videos."""

from __future__ import annotations

import json

from tests.serve.test_page import browser, enter_key, page, search_text, searches  # noqa: F401

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
        enter_key(page, KEY)
        page.locator("#key-dialog").wait_for(state="hidden")
        page.wait_for_function(
            "() => [...document.querySelectorAll('#collection option')]"
            ".some(o => o.value === 'page-a')"
        )
        options = page.locator("#collection option").evaluate_all("os => os.map(o => o.value)")
        assert options[0] == "" and {"default", "page-a"} <= set(options)
        sent = searches(page)
        search_text(page, "a cat")
        assert "collections" not in json.loads(sent[-1].post_data)
        page.select_option("#collection", "page-a")
        search_text(page, "a cat")
        assert json.loads(sent[-1].post_data)["collections"] == ["page-a"]
        shown = page.locator("#results .result").evaluate_all(
            "rs => rs.map(r => r.dataset.videoId)"
        )
        assert shown and set(shown) == {str(mine)}
    finally:
        live.client.delete("/v1/collections/page-a")
