"""A talk in Spanish through the live service (#55): its language on the video, on its
transcript's segments and its subtitles (as said, and in English with ``lang=en``), on the
search results that find it; ``languages`` keeps or drops it; an English query finds the
Spanish moment by its English rendering. The talk is spoken by espeak-ng and uploaded as a
real mp4; ingest runs the real models (Whisper base: slow on two busy cores)."""

from __future__ import annotations

import pytest

from tests.serve import test_page
from vifusion.samples.talks import SENTENCES, have_espeak, write_talk

from .conftest import KEY

# test_page's fixtures: a headless Chromium, and a tab of it on the live service's page
browser, page, enter_key = test_page.browser, test_page.page, test_page.enter_key

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not have_espeak(), reason="espeak-ng is not installed"),
]


@pytest.fixture(scope="module")
def spanish(live):
    """The Spanish talk's video id, uploaded and ready; deleted after the module."""
    weather, station = SENTENCES["es"]
    talk = write_talk(
        live.root / "languages" / "es.mp4",
        13.0,
        [(0.5, weather), (6.5, station)],
        fps=2,
        language="es",
    )
    accepted = live.vf.upload(talk.path, title="Una charla en español")
    assert live.vf.wait(accepted["job_id"], timeout_s=600)["status"] == "ready"
    yield accepted["video_id"]
    live.vf.delete(accepted["video_id"])


def search(live, **body) -> list[dict]:
    r = live.client.post("/v1/search", json={"modalities": ["speech"], "top_k": 5, **body})
    assert r.status_code == 200, r.text
    return r.json()["results"]


def test_the_video_and_its_transcript_say_the_language(live, spanish):
    assert live.client.get(f"/v1/videos/{spanish}").json()["language"] == "es"
    segments = live.client.get(f"/v1/videos/{spanish}/transcript").json()["segments"]
    assert segments and {s["language"] for s in segments} == {"es"}
    assert all(s["english"] for s in segments)
    said = " ".join(s["text"] for s in segments).lower()
    assert "estación" in said or "mercado" in said, said


def test_subtitles_as_said_and_in_english(live, spanish):
    url = f"/v1/videos/{spanish}/transcript?format=vtt"
    said = live.client.get(url)
    assert said.headers["content-type"].startswith("text/vtt")
    assert said.text.splitlines()[:2] == ["WEBVTT", "Language: es"]
    english = live.client.get(url + "&lang=en").text
    assert english.splitlines()[:2] == ["WEBVTT", "Language: en"]
    assert "station" in english.lower() or "train" in english.lower(), english
    assert "estación" not in english and "-->" in english


def test_searches_keep_the_languages_asked(live, spanish):
    query = "la estacion de tren junto al mercado"
    found = search(live, text=query, languages=["es"])
    assert found and found[0]["video_id"] == spanish
    assert found[0]["language"] == "es"
    assert spanish not in {r["video_id"] for r in search(live, text=query, languages=["de"])}


def test_an_english_query_finds_the_spanish_moment_and_shows_its_rendering(live, spanish):
    mine = [r for r in search(live, text="where is the train station") if r["video_id"] == spanish]
    assert mine, "the Spanish talk was not found by an English query"
    top = mine[0]
    assert top["language"] == "es"
    assert "estación" in top["snippet"].lower() or "mercado" in top["snippet"].lower()
    assert "station" in top["snippet_english"].lower() or "train" in top["snippet_english"].lower()


def test_the_page_offers_the_original_and_the_english_subtitles(live, spanish, page):
    enter_key(page, KEY)
    page.locator("#key-dialog").wait_for(state="hidden")
    page.fill("#search-input", "la estacion de tren")
    page.click("#search-button")
    page.locator(f'#results .result[data-video-id="{spanish}"]').first.click()
    page.wait_for_function(
        """() => {
            const v = document.getElementById('player');
            return v.textTracks.length === 2 && [...v.textTracks].every(t => t.cues && t.cues.length);
        }""",
        timeout=60_000,
    )
    tracks = "v => [...v.querySelectorAll('track')].map(t => [t.label, t.srclang, t.track.mode])"
    assert page.eval_on_selector("#player", tracks) == [
        ["Speech (es)", "es", "showing"],
        ["Speech in English", "en", "hidden"],
    ]
    assert page.locator("#subs-speech").inner_text() == "Speech as said (es)"
    page.select_option("#subs", "english")
    modes = "v => [...v.textTracks].map(t => t.mode)"
    assert page.eval_on_selector("#player", modes) == ["hidden", "showing"]
    english = page.eval_on_selector(
        "#player", "v => [...v.textTracks[1].cues].map(c => c.text).join(' ')"
    )
    assert "station" in english.lower() or "train" in english.lower(), english
