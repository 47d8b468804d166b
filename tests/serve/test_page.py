"""The web page (GET /) in a real browser, as a person uses it: key prompt, upload with job
progress (its stage and warnings), text search in the chosen modalities, thumbnails, what
matched and the words of each result, playback from a result (a signed /media URL, byte
ranges) with the search's moments on a timeline and subtitles, the library (state, play,
retry, delete), API errors and a
wrong key; where the key is kept; the API docs (/docs, /redoc). All of it under the service's
Content-Security-Policy, with no request leaving the service.

Needs Debian's chromium (/usr/bin/chromium) and the python ``playwright`` package; skipped
without them. Nothing is downloaded: the page has no external resources."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from serve._signed import MediaSigner
from vifusion.catalog import open_catalog
from vifusion.samples import write_video

from .conftest import KEY

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOT = Path("/tmp/vifusion-page.png")
SLOW_MS = 240_000  # ingest on a busy 2-core machine


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium not installed: apt-get install chromium")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="the python playwright package is not installed"
    )
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
    p.on(
        "console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None
    )
    return p


@pytest.fixture
def page(browser, live):
    context = browser.new_context(
        viewport={"width": 1280, "height": 860}
    )  # fresh storage each test
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
    shown = record_job_status(page)
    polled = []
    page.on("response", lambda r: polled.append(r) if "/v1/jobs/" in r.url else None)
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

        # Each stage the job reported while it ran was shown; its warnings (a video without
        # audio says so) are listed under it, as the API gives them.
        lines = shown()
        for job in (r.json() for r in polled):
            if job["status"] not in ("ready", "failed") and job.get("stage"):
                assert any(STAGES[job["stage"]] in line for line in lines), (job, lines)
        job = live.client.get(f"/v1/jobs/{page.get_attribute('#job', 'data-job-id')}").json()
        assert page.locator("#job-warnings li").all_inner_texts() == job.get("warnings", [])
        assert page.locator("#job-warnings").is_visible() == bool(job.get("warnings"))
        page.screenshot(path=str(tmp_path / "job.png"))
        shutil.copy(tmp_path / "job.png", SHOT.with_name("vifusion-job.png"))

        # Search as a person would: type, press the button.
        page.fill("#search-input", "a cat")
        page.click("#search-button")
        first = page.locator("#results .result").first
        first.wait_for(timeout=120_000)
        vid, start, end = (
            first.get_attribute(a) for a in ("data-video-id", "data-start", "data-end")
        )
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
        media = []
        page.on("response", lambda r: media.append(r) if "/media/" in r.url else None)
        first.click()
        page.locator("#player-panel").wait_for(state="visible")
        page.wait_for_function(
            """() => {
                const v = document.getElementById('player');
                return v.src.startsWith(location.origin + '/media/') && v.readyState >= 2 && !v.seeking
                    && v.played.length > 0;
            }""",
            timeout=60_000,
        )
        # It plays from a signed URL (no key in it), fetched in byte ranges.
        src = page.eval_on_selector("#player", "v => v.src")
        assert (
            src.startswith(f"{live.url}/media/{vid}?")
            and "exp=" in src
            and "sig=" in src
            and KEY not in src
        ), src
        assert 206 in [r.status for r in media], [(r.status, r.url) for r in media]
        played = page.eval_on_selector(
            "#player",
            "v => ({first: v.played.start(0), now: v.currentTime, paused: v.paused, error: v.error})",
        )
        assert played["error"] is None, played
        assert abs(played["first"] - start) < 0.3, (played, start)
        assert played["now"] >= start - 0.3, (played, start)
        assert page.locator("#error").is_hidden(), page.inner_text("#error")

        # Under the video, a mark per moment of this search in this video, the one playing
        # highlighted; clicking a mark seeks to its moment.
        moments = page.locator(f'#results .result[data-video-id="{vid}"]').evaluate_all(
            "rs => rs.map(r => [Number(r.dataset.start), Number(r.dataset.end)]).sort((a, b) => a[0] - b[0])"
        )
        marks = page.locator("#timeline .mark")
        assert page.locator("#timeline").is_visible()
        assert (
            marks.evaluate_all(
                "ms => ms.map(m => [Number(m.dataset.start), Number(m.dataset.end)])"
            )
            == moments
        )
        assert page.locator("#timeline .mark.current").get_attribute(
            "data-start"
        ) == first.get_attribute("data-start")
        last = marks.last
        page.eval_on_selector("#player", "v => { v.pause(); v.currentTime = 0; }")
        last.click()
        last_start, last_end = (
            float(last.get_attribute("data-start")),
            float(last.get_attribute("data-end")),
        )
        page.wait_for_function(
            f"() => {{ const v = document.getElementById('player'); return !v.seeking"
            f" && v.currentTime >= {last_start} - 0.3 && v.currentTime <= {last_end} + 1; }}"
        )
        assert "current" in last.get_attribute("class")
        # A video with no words gets no subtitle tracks and no subtitle choice.
        page.wait_for_function(
            f"() => document.getElementById('player').dataset.subtitlesOf === '{vid}'"
        )
        assert page.eval_on_selector("#player", "v => v.textTracks.length") == 0
        assert page.locator("#subs-row").is_hidden()
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
    assert (
        page.locator("#query-name").inner_text()
        == ("Image: " if kind == "image" else "Clip: ") + query.name
    )
    cat = live.videos["kitchen.mp4"].scene_of("chelsea")
    vid, start, end = (first.get_attribute(a) for a in ("data-video-id", "data-start", "data-end"))
    assert int(vid) == live.ids["kitchen.mp4"], f"top result for the cat {kind} is video {vid}"
    assert float(start) < cat.end_s and float(end) > cat.start_s, (start, end)
    assert page.locator("#error").is_hidden()


# -- the library -------------------------------------------------------------------------


def job_done(live, job_id: str) -> dict:
    """Poll a job until it is ready or failed."""
    for _ in range(600):
        job = live.client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in ("ready", "failed"):
            return job
        time.sleep(0.5)
    raise TimeoutError(f"job {job_id} still {job['status']}")


def row(page, video_id: int):
    return page.locator(f'#library .video-row[data-video-id="{video_id}"]')


def test_library_lists_plays_retries_and_deletes(page, live):
    # A video whose job failed: a file:// video cut short.
    path = live.root / "videos" / "page-cut-short.mp4"
    whole = live.videos["street.mp4"].path.read_bytes()
    path.write_bytes(whole[: len(whole) // 3])
    r = live.client.post("/v1/videos", json={"uri": path.as_uri(), "title": "Page: cut short"})
    assert r.status_code == 202, r.text
    broken = r.json()["video_id"]
    assert job_done(live, r.json()["job_id"])["status"] == "failed"
    try:
        enter_key(page, KEY)
        page.locator("#key-dialog").wait_for(state="hidden")
        page.focus("#tab-search")
        page.keyboard.press("ArrowRight")  # the tabs answer the keyboard
        page.locator("#library-view").wait_for(state="visible")
        assert page.locator("#search-view").is_hidden()
        assert page.get_attribute("#tab-library", "aria-selected") == "true"

        # An uploaded video: its title, state, length, and a thumbnail.
        kitchen = live.client.get(f"/v1/videos/{live.ids['kitchen.mp4']}").json()
        entry = row(page, kitchen["video_id"])
        entry.wait_for()
        assert entry.get_attribute("data-status") == "ready"
        assert entry.locator(".title").inner_text() == kitchen["title"]
        assert entry.locator(".lib-status").inner_text().startswith("Ready")
        m, s = divmod(int(kitchen["duration_s"]), 60)
        assert entry.locator(".lib-duration").inner_text() == f"{m}:{s:02d}"
        assert entry.locator(".lib-added").inner_text().startswith("Added ")
        page.wait_for_function(f"""() => {{ const i = document.querySelector('#library .video-row[data-video-id="{kitchen["video_id"]}"] img');
            return i.complete && i.naturalWidth > 0; }}""")
        page.screenshot(path=str(SHOT.with_name("vifusion-library.png")))

        # The failed one says why; retry (its file fixed meanwhile) queues it again, and the
        # library follows it to ready.
        failed = row(page, broken)
        assert failed.get_attribute("data-status") == "failed"
        error = live.client.get(f"/v1/videos/{broken}").json()["error"]
        assert error and error in failed.locator(".lib-status").inner_text()
        assert failed.locator(".lib-play").count() == 0
        shutil.copyfile(live.videos["street.mp4"].path, path)
        with page.expect_response(f"**/v1/videos/{broken}/retry") as retried:
            failed.locator(".lib-retry").click()
        assert retried.value.status == 202
        page.wait_for_selector(
            f'#library .video-row[data-video-id="{broken}"]:not([data-status=failed])'
        )
        page.wait_for_selector(
            f'#library .video-row[data-video-id="{broken}"][data-status=ready]', timeout=SLOW_MS
        )
        assert failed.locator(".lib-status").inner_text().startswith("Ready")

        # Play from the library: a signed URL, from the start; no search, so no marks.
        entry.locator(".lib-play").click()
        page.locator("#player-panel").wait_for(state="visible")
        page.wait_for_function("""() => { const v = document.getElementById('player');
            return v.src.startsWith(location.origin + '/media/') && v.readyState >= 2 && v.played.length > 0; }""")
        assert page.locator("#timeline").is_hidden()
        # A URL that runs out mid-film (the service refuses its next range: 403) is replaced,
        # and the video goes on from where it was.
        expired, _ = MediaSigner(KEY, 60).url(kitchen["video_id"], now=time.time() - 120)
        page.eval_on_selector("#player", "v => { v.pause(); v.currentTime = 3; }")
        page.wait_for_function(
            "() => { const v = document.getElementById('player'); return !v.seeking && v.currentTime === 3; }"
        )
        page.eval_on_selector("#player", f"v => {{ v.src = '{expired}'; }}")
        page.wait_for_function(f"""() => {{ const v = document.getElementById('player');
            return v.src.includes('/media/') && !v.src.endsWith('{expired}') && v.readyState >= 2 && !v.seeking
                && Math.abs(v.currentTime - 3) < 0.5; }}""")
        assert page.locator("#error").is_hidden(), page.inner_text("#error")
        page.keyboard.press("Escape")
        page.locator("#player-panel").wait_for(state="hidden")

        # Delete asks first: Cancel keeps it, Delete removes it.
        failed.locator(".lib-delete").click()
        assert failed.locator(".confirm-text").is_visible()
        page.keyboard.press("Escape")  # focus is on Cancel; Escape cancels too
        assert failed.locator(".lib-delete").is_visible()
        failed.locator(".lib-delete").click()
        failed.locator(".lib-confirm").click()
        failed.wait_for(state="detached")
        assert live.client.get(f"/v1/videos/{broken}").status_code == 404
        assert entry.is_visible()
    finally:
        live.client.delete(f"/v1/videos/{broken}")
        path.unlink(missing_ok=True)


# -- what is said and written: modalities, snippets, subtitles ---------------------------

STAGES = {
    "fetching": "fetching the video",
    "probing": "reading its format",
    "frames": "reading frames",
    "speech": "transcribing speech",
    "saving": "saving",
}  # as the page names a job's stage
SAID = [
    (1.0, 4.0, "Our mascot Quillfeather approved the harbour budget."),
    (5.0, 8.0, "<script>window.pwned = 1</script> is what the slide said & nothing more"),
]
SHOWN = [(2.0, 6.0, "Harbour budget: three new cranes")]
BADGE = {
    "visual": "visual",
    "speech": "speech",
    "screen": "screen text",
}  # a modality as its badge names it


def record_job_status(page):
    """Record every text the job's status line shows from now on; returns a reader of them."""
    page.evaluate("""() => {
        window.jobLines = [];
        const s = document.getElementById('job-status');
        new MutationObserver(() => window.jobLines.push(s.textContent))
            .observe(s, {childList: true, characterData: true, subtree: true});
    }""")
    return lambda: page.evaluate("window.jobLines")


@pytest.fixture
def words(live):
    """The launch video says SAID and shows SHOWN, stored in the live service's catalog as
    ingest stores them (keyword search finds them there); taken out again after the test."""
    cat = open_catalog(live.cfg)
    launch = live.ids["launch.mp4"]
    cat.put_texts(launch, "speech", SAID)
    cat.put_texts(launch, "screen", SHOWN)
    yield launch
    cat.put_texts(launch, "speech", [])
    cat.put_texts(launch, "screen", [])
    cat.close()


def searches(page) -> list:
    """The /v1/search requests the page sends from now on."""
    sent = []
    page.on(
        "request",
        lambda r: sent.append(r) if r.url.endswith("/v1/search") and r.method == "POST" else None,
    )
    return sent


def picker_with(page, key: str, picker: str, value: str) -> list[str]:
    """Enter ``key``, wait until the ``picker`` select (its id) offers ``value``, and return
    the values it offers."""
    enter_key(page, key)
    page.locator("#key-dialog").wait_for(state="hidden")
    page.wait_for_function(
        f"() => [...document.querySelectorAll('#{picker} option')].some(o => o.value === {value!r})"
    )
    return page.locator(f"#{picker} option").evaluate_all("os => os.map(o => o.value)")


def search_picked(page, picker: str, value: str, field: str) -> None:
    """A text search sends ``field`` only once the ``picker`` select (its id) is set to
    ``value``, then as [``value``]."""
    sent = searches(page)
    search_text(page, "a cat")
    assert field not in json.loads(sent[-1].post_data)
    page.select_option(f"#{picker}", value)
    search_text(page, "a cat")
    assert json.loads(sent[-1].post_data)[field] == [value]


def shown_videos(page) -> set[str]:
    """The video ids of the results shown."""
    return set(
        page.locator("#results .result").evaluate_all("rs => rs.map(r => r.dataset.videoId)")
    )


def search_text(page, text: str) -> None:
    page.fill("#search-input", text)
    page.click("#search-button")
    wait_searched(page)


def wait_searched(page) -> None:
    """Wait for the search under way to be shown (the button is off while one runs)."""
    page.wait_for_function(
        "() => !document.getElementById('search-button').disabled"
        " && !document.querySelector('#results .loading')"
    )


def test_modality_toggles_choose_what_a_text_search_looks_in(page, live, words, tmp_path):
    enter_key(page, KEY)
    page.locator("#key-dialog").wait_for(state="hidden")
    sent = searches(page)
    assert [page.is_checked(f"#mode-{m}") for m in ("visual", "speech", "screen")] == [
        True,
        True,
        True,
    ]

    search_text(page, "mascot Quillfeather")
    assert json.loads(sent[-1].post_data)["modalities"] == ["visual", "speech", "screen"]
    said = page.locator(f'#results .result[data-video-id="{words}"][data-matched*="speech"]')
    assert said.count() == 1
    assert said.get_attribute("data-start") == "1" and said.get_attribute("data-end") == "4"
    badges = [b.lower() for b in said.locator(".badge").all_inner_texts()]
    assert (
        badges == [BADGE[m] for m in said.get_attribute("data-matched").split(",")]
        and "speech" in badges
    )
    assert said.locator(".snippet mark").all_inner_texts() == ["mascot", "Quillfeather"]
    assert said.locator(".snippet").inner_text() == SAID[0][2]
    page.screenshot(path=str(tmp_path / "words.png"), full_page=True)
    shutil.copy(tmp_path / "words.png", SHOT.with_name("vifusion-words.png"))

    # Unticking a modality searches again without it.
    with page.expect_response("**/v1/search"):
        page.uncheck("#mode-speech")
    wait_searched(page)
    assert json.loads(sent[-1].post_data)["modalities"] == ["visual", "screen"]
    matched = page.locator("#results .result").evaluate_all("rs => rs.map(r => r.dataset.matched)")
    assert matched and all("speech" not in m.split(",") for m in matched), matched

    # Screen text alone: what is written on the launch video, and nothing seen.
    page.uncheck("#mode-visual")
    wait_searched(page)
    search_text(page, "harbour cranes")
    assert json.loads(sent[-1].post_data)["modalities"] == ["screen"]
    first = page.locator("#results .result").first
    assert first.get_attribute("data-matched") == "screen" and first.get_attribute(
        "data-video-id"
    ) == str(words)
    assert first.locator(".snippet mark").all_inner_texts() == ["Harbour", "cranes"]
    assert page.locator("#results .result").count() == 1
    # The last ticked modality stays ticked: a search must look somewhere.
    page.click("#mode-screen")
    assert page.is_checked("#mode-screen")

    # An image is searched by what is seen: the speech and screen toggles do not apply to it.
    from PIL import Image

    from vifusion.samples import photo

    query = tmp_path / "chelsea.png"
    Image.fromarray(photo("chelsea")).save(query)
    page.set_input_files("#query-file", str(query))
    wait_searched(page)
    assert "multipart/form-data" in sent[-1].headers["content-type"]
    assert "modalities" not in sent[-1].post_data_buffer.decode("latin-1")
    assert page.is_disabled("#mode-speech") and page.is_disabled("#mode-screen")
    assert page.locator("#results .result").first.get_attribute("data-matched") == "visual"


def test_a_snippet_is_shown_as_text_with_the_query_words_marked(page, live, words):
    enter_key(page, KEY)
    page.locator("#key-dialog").wait_for(state="hidden")
    search_text(page, "script pwned")
    said = page.locator(f'#results .result[data-video-id="{words}"][data-matched*="speech"]')
    assert said.count() == 1
    snippet = said.locator(".snippet")
    assert snippet.inner_text() == SAID[1][2]  # the markup in the words is shown, as words
    assert snippet.locator("mark").all_inner_texts() == ["script", "pwned", "script"]
    assert snippet.evaluate(
        "p => [...p.children].every(c => c.tagName === 'MARK')"
    )  # nothing else became an element
    assert page.locator("#results script").count() == 0
    assert page.evaluate("window.pwned") is None


def test_subtitles_play_with_the_video(page, live, words, tmp_path):
    enter_key(page, KEY)
    page.locator("#key-dialog").wait_for(state="hidden")
    search_text(page, "mascot Quillfeather")
    page.locator(f'#results .result[data-video-id="{words}"][data-matched*="speech"]').click()
    page.locator("#player-panel").wait_for(state="visible")
    page.wait_for_function(
        """() => {
            const v = document.getElementById('player');
            return v.readyState >= 2 && v.textTracks.length === 2
                && [...v.textTracks].every(t => t.cues && t.cues.length > 0);
        }""",
        timeout=60_000,
    )
    tracks = page.eval_on_selector(
        "#player",
        """v => [...v.querySelectorAll('track')].map(t => ({
        label: t.label, src: t.src, mode: t.track.mode, cues: [...t.track.cues].map(c => [c.startTime, c.endTime, c.text])}))""",
    )
    assert [(t["label"], t["mode"]) for t in tracks] == [
        ("Speech", "showing"),
        ("Screen text", "hidden"),
    ]
    assert all(t["src"].startswith("blob:") for t in tracks)  # fetched with the key
    assert tracks[0]["cues"][0] == list(SAID[0])
    assert tracks[0]["cues"][1][2] == SAID[1][2].replace("&", "&amp;").replace("<", "&lt;").replace(
        ">", "&gt;"
    )
    assert tracks[1]["cues"] == [list(SHOWN[0])]

    # The choice under the player shows what it names.
    page.locator("#subs-row").wait_for(state="visible")
    modes = "v => [...v.textTracks].map(t => t.mode)"
    for choice, expected in [
        ("both", ["showing", "showing"]),
        ("screen", ["hidden", "showing"]),
        ("off", ["hidden", "hidden"]),
        ("speech", ["showing", "hidden"]),
    ]:
        page.select_option("#subs", choice)
        assert page.eval_on_selector("#player", modes) == expected, choice

    # A still at 2.5 s, with the speech subtitle on it, to look at.
    page.eval_on_selector("#player", "v => { v.pause(); v.currentTime = 2.5; }")
    page.wait_for_function(
        "() => { const v = document.getElementById('player');"
        " return !v.seeking && v.textTracks[0].activeCues.length === 1; }"
    )
    page.screenshot(path=str(tmp_path / "subtitles.png"))
    shutil.copy(tmp_path / "subtitles.png", SHOT.with_name("vifusion-subtitles.png"))


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
    return tuple(
        page.evaluate(
            "[sessionStorage.getItem('vifusion.apiKey'), localStorage.getItem('vifusion.apiKey')]"
        )
    )


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
