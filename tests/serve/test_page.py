"""The web page (GET /) in a real browser, as a person uses it: key prompt, upload with job
progress, text search, thumbnails, playback from a result, API errors and a wrong key; where
the key is kept; the API docs (/docs, /redoc). All of it under the service's
Content-Security-Policy, with no request leaving the service.

Needs Debian's chromium (/usr/bin/chromium) and the python ``playwright`` package; skipped
without them. Nothing is downloaded: the page has no external resources."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vifusion.samples import write_video

from .conftest import KEY

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
SHOT = Path("/tmp/vifusion-page.png")
SLOW_MS = 240_000  # ingest on a busy 2-core machine


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium not installed: apt-get install chromium")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the python playwright package is not installed")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        yield b
        b.close()


def watched(context, live, errors: list[str]):
    """A new tab that records script errors, CSP refusals and any request that leaves the service."""

    def route(r) -> None:
        if r.request.url.startswith(live.url):
            r.continue_()
        else:
            errors.append(f"request outside the service: {r.request.url}")
            r.abort()

    context.route("**/*", route)
    p = context.new_page()
    p.on("pageerror", lambda e: errors.append(str(e)))
    p.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None)
    return p


@pytest.fixture
def page(browser, live):
    context = browser.new_context(viewport={"width": 1280, "height": 860})  # fresh storage each test
    context.set_default_timeout(60_000)
    errors: list[str] = []
    p = watched(context, live, errors)
    p.goto(live.url)
    yield p
    context.close()
    assert not errors, f"errors on the page: {errors}"


def enter_key(page, key: str) -> None:
    page.locator("#key-dialog").wait_for(state="visible")
    page.fill("#key-input", key)
    page.click("#key-save")


def test_upload_search_and_play(page, live, tmp_path):
    enter_key(page, KEY)
    page.locator("#key-dialog").wait_for(state="hidden")

    # Upload a new video: 4 s of moving shapes, then 4 s of the cat.
    clip = write_video(live.root / "page-upload" / "cat-upload.mp4", ["motion", "chelsea"])
    page.set_input_files("#upload-file", str(clip.path))
    page.fill("#upload-title", "Page upload: the cat")
    page.click("#upload-button")
    video_id = None
    try:
        page.wait_for_selector("#job[data-video-id]", timeout=SLOW_MS)
        video_id = int(page.get_attribute("#job", "data-video-id"))
        page.wait_for_selector("#job[data-status=ready], #job[data-status=failed]", timeout=SLOW_MS)
        status = page.inner_text("#job-status")
        assert page.get_attribute("#job", "data-status") == "ready", status
        assert page.eval_on_selector("#job-progress", "p => p.value") == 1
        frames = int(status.split("·")[1].split()[0])
        assert frames > 0, status
        assert page.input_value("#upload-file") == ""  # the form is reset for the next upload

        # Search as a person would: type, press the button.
        page.fill("#search-input", "a cat")
        page.click("#search-button")
        first = page.locator("#results .result").first
        first.wait_for(timeout=120_000)
        vid, start, end = (first.get_attribute(a) for a in ("data-video-id", "data-start", "data-end"))
        vid, start, end = int(vid), float(start), float(end)
        cat = live.videos["kitchen.mp4"].scene_of("chelsea")
        upload_cat = clip.scene_of("chelsea")
        if vid == video_id:
            assert start < upload_cat.end_s and end > upload_cat.start_s, (start, end)
            assert first.locator(".title").inner_text() == "Page upload: the cat"
        else:
            assert vid == live.ids["kitchen.mp4"], f"top result for 'a cat' is video {vid}"
            assert start < cat.end_s and end > cat.start_s, (start, end)
        assert 0 < float(first.locator(".score").inner_text()) <= 1
        m, s = divmod(int(start), 60)
        assert first.locator(".range").inner_text().startswith(f"{m}:{s:02d}–")
        # Every thumbnail arrives (fetched with the key, shown from a blob), none is broken.
        page.wait_for_function(
            """() => [...document.querySelectorAll('#results img.thumb')]
                .every(i => (i.complete && i.naturalWidth > 0) || i.classList.contains('broken'))""",
            timeout=120_000,
        )
        assert page.locator("#results img.thumb.broken").count() == 0
        assert first.locator("img.thumb").evaluate("i => i.naturalWidth") > 0
        assert first.locator("img.thumb").get_attribute("src").startswith("blob:")
        page.screenshot(path=str(tmp_path / "results.png"), full_page=True)
        shutil.copy(tmp_path / "results.png", SHOT)

        # Play from the segment's start: the first stretch the player played begins there (a
        # player that started at 0 would pass through start_s later, so currentTime alone is no proof).
        assert start > 0, "the cat scene starts after 0 s, or the seek below proves nothing"
        first.click()
        page.locator("#player-panel").wait_for(state="visible")
        page.wait_for_function(
            """() => {
                const v = document.getElementById('player');
                return v.src.startsWith('blob:') && v.readyState >= 2 && !v.seeking && v.played.length > 0;
            }""",
            timeout=60_000,
        )
        played = page.eval_on_selector(
            "#player", "v => ({first: v.played.start(0), now: v.currentTime, paused: v.paused, error: v.error})"
        )
        assert played["error"] is None, played
        assert abs(played["first"] - start) < 0.3, (played, start)
        assert played["now"] >= start - 0.3, (played, start)
        assert page.locator("#error").is_hidden(), page.inner_text("#error")
        page.screenshot(path=str(tmp_path / "player.png"))
        shutil.copy(tmp_path / "player.png", SHOT.with_name("vifusion-player.png"))
        page.keyboard.press("Escape")
        page.locator("#player-panel").wait_for(state="hidden")
    finally:
        if video_id is not None:
            r = live.client.delete(f"/v1/videos/{video_id}")
            assert r.status_code == 204, r.text


@pytest.mark.parametrize("kind", ["image", "clip"])
def test_search_by_image_and_clip(page, live, tmp_path, kind):
    from PIL import Image

    from vifusion.samples import photo

    enter_key(page, KEY)
    page.locator("#key-dialog").wait_for(state="hidden")
    if kind == "image":
        query = tmp_path / "chelsea.png"
        Image.fromarray(photo("chelsea")).save(query)
    else:
        query = write_video(tmp_path / "chelsea-clip.mp4", ["chelsea"], scene_s=2.0).path
    page.set_input_files("#query-file", str(query))  # picking a file searches by it at once
    first = page.locator("#results .result").first
    first.wait_for(timeout=120_000)
    assert query.name in page.inner_text("#results-head")
    assert page.locator("#query-name").inner_text() == ("Image: " if kind == "image" else "Clip: ") + query.name
    cat = live.videos["kitchen.mp4"].scene_of("chelsea")
    vid, start, end = (first.get_attribute(a) for a in ("data-video-id", "data-start", "data-end"))
    assert int(vid) == live.ids["kitchen.mp4"], f"top result for the cat {kind} is video {vid}"
    assert float(start) < cat.end_s and float(end) > cat.start_s, (start, end)
    assert page.locator("#error").is_hidden()


def test_api_error_is_shown(page, live, tmp_path):
    enter_key(page, KEY)
    page.locator("#key-dialog").wait_for(state="hidden")
    fake = tmp_path / "notes.png"
    fake.write_text("this is not a picture\n")
    page.set_input_files("#query-file", str(fake))  # dropping a file searches by it at once
    page.locator("#error").wait_for(state="visible")
    text = page.inner_text("#error-text")
    assert "invalid_image" in text and "not a readable image" in text, text
    assert page.locator("#results .result").count() == 0
    assert "failed" in page.inner_text("#results").lower()
    page.screenshot(path=str(tmp_path / "error.png"))


def test_wrong_key_is_refused(page, live, tmp_path):
    enter_key(page, "not-the-key")
    err = page.locator("#key-error")
    err.wait_for(state="visible")
    assert "not accepted" in err.inner_text()
    page.screenshot(path=str(tmp_path / "wrong-key.png"))
    assert page.locator("#key-dialog").is_visible()
    assert stored(page) == (None, None)

    # The right key closes the prompt and is kept across a reload, in this tab only.
    page.fill("#key-input", KEY)
    page.click("#key-save")
    page.locator("#key-dialog").wait_for(state="hidden")
    assert stored(page) == (KEY, None)
    page.reload()
    page.wait_for_load_state("networkidle")
    assert page.locator("#key-dialog").is_hidden()

    # A stored key that went stale: the first 401 brings the prompt back, with the reason.
    page.evaluate("sessionStorage.setItem('vifusion.apiKey', 'revoked')")
    page.reload()
    page.locator("#key-dialog").wait_for(state="visible")
    assert "not accepted" in page.inner_text("#key-error")

    # "Change key" opens the prompt too.
    page.fill("#key-input", KEY)
    page.click("#key-save")
    page.locator("#key-dialog").wait_for(state="hidden")
    page.click("#key-change")
    page.locator("#key-dialog").wait_for(state="visible")
    assert page.locator("#key-error").is_hidden()
    page.click("#key-cancel")
    page.locator("#key-dialog").wait_for(state="hidden")


def stored(page) -> tuple[str | None, str | None]:
    """The key as this tab keeps it: (sessionStorage, localStorage)."""
    return tuple(page.evaluate("[sessionStorage.getItem('vifusion.apiKey'), localStorage.getItem('vifusion.apiKey')]"))


def test_the_key_outlives_the_tab_only_when_remembered(page, live):
    """Unticked, the key is in sessionStorage: a new tab asks again. Ticked, it is in
    localStorage (and only there): a new tab has it; unticking it later forgets it."""
    enter_key(page, KEY)
    page.locator("#key-dialog").wait_for(state="hidden")
    assert stored(page) == (KEY, None)
    other = page.context.new_page()
    other.goto(live.url)
    other.locator("#key-dialog").wait_for(state="visible")
    other.close()

    page.click("#key-change")
    assert not page.is_checked("#key-remember")
    page.fill("#key-input", KEY)
    page.check("#key-remember")
    page.click("#key-save")
    page.locator("#key-dialog").wait_for(state="hidden")
    assert stored(page) == (None, KEY)
    other = page.context.new_page()
    other.goto(live.url)
    other.wait_for_load_state("networkidle")
    assert other.locator("#key-dialog").is_hidden()
    other.close()

    page.click("#key-change")
    assert page.is_checked("#key-remember")
    page.fill("#key-input", KEY)
    page.uncheck("#key-remember")
    page.click("#key-save")
    page.locator("#key-dialog").wait_for(state="hidden")
    assert stored(page) == (KEY, None)


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_api_docs_render_from_the_service_alone(browser, live, path, tmp_path):
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(60_000)
    errors: list[str] = []
    p = watched(context, live, errors)
    try:
        p.goto(live.url + path)
        if path == "/docs":
            assert "ViFusion" in p.locator(".swagger-ui .info .title").inner_text()
            p.locator(".opblock").first.wait_for()
            assert p.locator(".opblock-summary-path", has_text="/v1/search").count() == 1
        else:
            assert "ViFusion" in p.locator("h1").first.inner_text()
            p.get_by_text("/v1/search").first.wait_for(state="attached")
        p.screenshot(path=str(tmp_path / "docs.png"))
        shutil.copy(tmp_path / "docs.png", SHOT.with_name(f"vifusion{path.replace('/', '-')}.png"))
    finally:
        context.close()
    # ReDoc's sidebar shows Redocly's logo from their CDN: the CSP blocks it, as it should.
    errors = [e for e in errors if not ("cdn.redoc.ly" in e and "violates" in e)]
    assert not errors, f"errors on {path}: {errors}"
