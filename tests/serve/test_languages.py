"""The languages a search can be limited to (GET /v1/languages) and the web page's language
picker, through the live service: a demo video is marked as spoken in Spanish in the catalog
(as ingest marks a talk; the language is what is under test, not the speech model), listed
with its count, kept from a key limited to another collection, and a search from the page
sends the chosen language and shows only its videos (a real browser, as tests/serve/test_page.py)."""

from __future__ import annotations

import pytest

from tests.serve.test_page import (  # noqa: F401
    browser,
    page,
    picker_with,
    search_picked,
    shown_videos,
)
from vifusion.catalog import open_catalog
from vifusion.query.lexicon import Lexicon

from .conftest import KEY


@pytest.fixture
def spanish(live):
    """The kitchen video, spoken in Spanish for the test."""
    video_id = live.ids["kitchen.mp4"]
    catalog = open_catalog(live.cfg)
    catalog.set_video_language(video_id, "es")
    try:
        yield video_id
    finally:
        catalog.set_video_language(video_id, None)
        catalog.close()


def test_the_languages_spoken_are_listed_with_their_videos(live, spanish):
    listed = live.client.get("/v1/languages").json()["languages"]
    es = [x for x in listed if x["code"] == "es"]
    with_dictionary = "es" in Lexicon(live.cfg.dictionaries).languages
    assert es == [{"code": "es", "videos": 1, "dictionary": with_dictionary}]
    found = live.client.post(
        "/v1/search", json={"text": "a cat", "languages": ["es"], "modalities": ["visual"]}
    ).json()["results"]
    assert found and {m["video_id"] for m in found} == {spanish}


def test_a_key_limited_to_a_collection_sees_only_its_languages(live, spanish):
    r = live.client.post("/v1/keys", json={"scope": "search", "collections": ["elsewhere"]})
    assert r.status_code == 201, r.text
    limited = {"Authorization": f"Bearer {r.json()['key']}"}
    assert live.client.get("/v1/languages", headers=limited).json() == {"languages": []}


def test_the_page_picker_lists_languages_and_a_search_keeps_to_the_chosen_one(page, live, spanish):  # noqa: F811
    assert picker_with(page, KEY, "language", "es")[0] == ""
    search_picked(page, "language", "es", "languages")
    assert shown_videos(page) == {str(spanish)}
