"""Searching what is said and written, and transcripts, over real HTTP against the live
service (see conftest.py). The words are put in its catalog as ingest stores them, on two of
the demo videos, and taken out again at the end; keyword search finds them there."""

from __future__ import annotations

import re

import pytest

from tests.serve.test_app import error
from vifusion.catalog import open_catalog
from vifusion.query.ranking import bracketed

SAID = [
    (1.0, 3.5, "Welcome to the Lisbon office & <b>its</b> kitchen tour."),
    (4.0, 7.0, "Our mascot Zorblax approved the quarterly budget."),
]
SHOWN = [(2.0, 6.0, "Hiring plan: three engineers in Porto")]


@pytest.fixture(scope="module")
def words(live):
    """The kitchen video says SAID; the street video shows SHOWN."""
    cat = open_catalog(live.cfg)
    kitchen, street = live.ids["kitchen.mp4"], live.ids["street.mp4"]
    cat.put_texts(kitchen, "speech", SAID)
    cat.put_texts(street, "screen", SHOWN)
    yield kitchen, street
    cat.put_texts(kitchen, "speech", [])
    cat.put_texts(street, "screen", [])
    cat.close()


def search(live, **body) -> list[dict]:
    r = live.client.post("/v1/search", json=body)
    assert r.status_code == 200, r.text
    return r.json()["results"]


def test_a_spoken_phrase_finds_its_moment_with_the_words(live, words):
    kitchen, _ = words
    top = search(live, text="mascot Zorblax approved the budget", top_k=3)[0]
    assert (top["video_id"], top["start_s"], top["end_s"]) == (kitchen, 4.0, 7.0)
    assert "speech" in top["matched"]
    assert (
        bracketed(top["snippet"], top["highlights"])
        == "Our [mascot] [Zorblax] [approved] the quarterly [budget]."
    )


def test_a_written_phrase_as_a_multipart_search_with_a_comma_list(live, words):
    _, street = words
    form = {"text": (None, "hiring engineers in Porto"), "modalities": (None, "screen, speech")}
    r = live.client.post("/v1/search", files=form)
    assert r.status_code == 200, r.text
    top = r.json()["results"][0]
    assert (top["video_id"], top["start_s"], top["end_s"], top["matched"]) == (
        street,
        2.0,
        6.0,
        ["screen"],
    )
    assert (
        bracketed(top["snippet"], top["highlights"])
        == "[Hiring] plan: three [engineers] in [Porto]"
    )


def test_modalities_restrict_the_search(live, words):
    kitchen, _ = words
    said = "mascot Zorblax approved the budget"
    assert all(
        "speech" not in m["matched"]
        for m in search(live, text=said, top_k=20, modalities=["screen"])
    )
    seen = search(live, text=said, top_k=20, modalities=["visual"])
    assert seen and all(m["matched"] == ["visual"] and m["snippet"] is None for m in seen)
    assert search(live, text=said, modalities=["speech"])[0]["video_id"] == kitchen


def test_a_visual_match_says_so_and_has_no_snippet(live, words):
    top = search(live, text="a cat", top_k=1)[0]
    assert (top["matched"], top["snippet"]) == (["visual"], None)


def test_the_metadata_filter_applies_to_speech_and_screen_text(live, words):
    # only the launch video (uploaded by uri) passes; the words are in the other two, so nothing is found
    for text in ("mascot Zorblax approved the budget", "hiring engineers in Porto"):
        found = search(live, text=text, top_k=20, filter={"upload": False})
        assert {m["video_id"] for m in found} <= {live.ids["launch.mp4"]}
        assert search(live, text=text, top_k=20, filter={"upload": True})  # where the words are


def test_fusion_names_how_the_modalities_lists_are_blended(live, words):
    kitchen, _ = words
    said = "mascot Zorblax approved the budget"
    top = {
        f: search(live, text=said, top_k=1, fusion=f)[0] for f in ("rrf", "calibrated", "evidence")
    }
    assert {(m["video_id"], m["start_s"], m["end_s"]) for m in top.values()} == {
        (kitchen, 4.0, 7.0)
    }
    # rrf adds 1 / (60 + rank) from each of at most five lists; calibrated the words' share
    # held (all: 1) and their meaning's (none here: the words are put in the catalog, not in
    # the shards); evidence a probability that the moment is relevant
    assert top["rrf"]["score"] <= 5 / 61
    assert top["calibrated"]["score"] >= 1.0
    assert 0.5 < top["evidence"]["score"] <= 1.0
    error(
        live.client.post("/v1/search", json={"text": said, "fusion": "bm25"}),
        422,
        "invalid_request",
    )


@pytest.mark.parametrize(
    "modalities",
    [["smell"], [], "", "visual,smell", ["visual"] * 4, [1], {"a": 1}, [{}], [["speech"]]],
)
def test_unknown_modalities_are_a_422(live, modalities):
    error(
        live.client.post("/v1/search", json={"text": "a cat", "modalities": modalities}),
        422,
        "invalid_request",
    )


def test_a_multipart_unknown_modality_is_a_422(live):
    form = {"text": (None, "a cat"), "modalities": (None, "speech,smell")}
    error(live.client.post("/v1/search", files=form), 422, "invalid_request")


def test_a_clip_query_without_visual_is_a_422(live):
    r = live.client.post(
        "/v1/search",
        json={
            "video_id": live.ids["street.mp4"],
            "start_s": 1,
            "end_s": 3,
            "modalities": ["speech"],
        },
    )
    assert "visual" in error(r, 422, "invalid_query")


@pytest.mark.parametrize(
    "query",
    [
        '"',
        "NEAR(",
        "*",
        "zorblax*",
        "-budget",
        "AND OR NOT",
        "x" * 1000,
        "'; DROP TABLE texts; --",
        "💸 budget",
        "{budget}",
        "^budget",
    ],
)
def test_hostile_query_strings_are_searches(live, words, query):
    r = live.client.post("/v1/search", json={"text": query, "modalities": ["speech", "screen"]})
    assert r.status_code == 200, r.text


# -- transcripts -----------------------------------------------------------------------


def test_a_transcript_as_json(live, words):
    kitchen, street = words
    r = live.client.get(f"/v1/videos/{kitchen}/transcript")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json() == {
        "video_id": kitchen,
        "segments": [  # language and english: not known for rows stored without them
            {
                "kind": "speech",
                "start_s": s,
                "end_s": e,
                "text": t,
                "language": None,
                "english": None,
            }
            for s, e, t in SAID
        ],
    }
    assert (
        live.client.get(f"/v1/videos/{street}/transcript").json()["segments"] == []
    )  # nothing said
    shown = live.client.get(f"/v1/videos/{street}/transcript", params={"kind": "screen"}).json()[
        "segments"
    ]
    assert shown == [
        {
            "kind": "screen",
            "start_s": 2.0,
            "end_s": 6.0,
            "text": SHOWN[0][2],
            "language": None,
            "english": None,
        }
    ]
    both = live.client.get(f"/v1/videos/{street}/transcript", params={"kind": "all"}).json()[
        "segments"
    ]
    assert both == shown


_TIMING = re.compile(
    r"^(\d{2,}):([0-5]\d):([0-5]\d)\.(\d{3}) --> (\d{2,}):([0-5]\d):([0-5]\d)\.(\d{3})$"
)


def parse_webvtt(body: str) -> list[tuple[str | None, float, float, str]]:
    """Cues (id, start_s, end_s, text) of a WebVTT file, checking what the format requires:
    the header, blank-line separated blocks, timings in order and end after start, and cue
    text without '-->' or unescaped '<' and '&'."""
    assert body.startswith("WEBVTT") and body[6:7] in ("", "\n", " ", "\t")
    blocks = body.split("\n\n")
    assert blocks[0].split("\n")[0].startswith("WEBVTT")
    cues = []
    for block in (b.strip("\n") for b in blocks[1:] if b.strip()):
        lines = block.split("\n")
        cue_id = None
        if "-->" not in lines[0]:
            cue_id, lines = lines[0], lines[1:]
        m = _TIMING.match(lines[0])
        assert m, lines[0]
        h1, m1, s1, ms1, h2, m2, s2, ms2 = map(int, m.groups())
        start, end = h1 * 3600 + m1 * 60 + s1 + ms1 / 1000, h2 * 3600 + m2 * 60 + s2 + ms2 / 1000
        assert end > start and (not cues or start >= cues[-1][1])
        text = "\n".join(lines[1:])
        assert text and "-->" not in text and "<" not in text
        assert re.fullmatch(r"([^&]|&(amp|lt|gt);)*", text), text
        cues.append((cue_id, start, end, text))
    return cues


def test_a_transcript_as_webvtt_escapes_the_words(live, words):
    kitchen, street = words
    r = live.client.get(f"/v1/videos/{kitchen}/transcript", params={"format": "vtt"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/vtt")
    assert parse_webvtt(r.text) == [
        (
            "speech-0",
            1.0,
            3.5,
            "Welcome to the Lisbon office &amp; &lt;b&gt;its&lt;/b&gt; kitchen tour.",
        ),
        ("speech-1", 4.0, 7.0, SAID[1][2]),
    ]
    r = live.client.get(f"/v1/videos/{street}/transcript", params={"format": "vtt", "kind": "all"})
    assert parse_webvtt(r.text) == [("screen-0", 2.0, 6.0, SHOWN[0][2])]
    assert parse_webvtt(live.client.get(f"/v1/videos/{street}/transcript?format=vtt").text) == []


def test_transcript_errors(live, words):
    error(live.client.get("/v1/videos/999999/transcript"), 404, "not_found")
    error(
        live.client.get("/v1/videos/999999/transcript", params={"format": "vtt"}), 404, "not_found"
    )
    kitchen, _ = words
    error(
        live.client.get(f"/v1/videos/{kitchen}/transcript", params={"kind": "audio"}),
        422,
        "invalid_request",
    )
    error(
        live.client.get(f"/v1/videos/{kitchen}/transcript", params={"format": "srt"}),
        422,
        "invalid_request",
    )
    error(live.client.get("/v1/videos/0/transcript"), 422, "invalid_request")
    error(live.anon.get(f"/v1/videos/{kitchen}/transcript"), 401, "unauthorized")


def test_openapi_documents_modalities_matched_snippet_and_transcripts(live):
    spec = live.anon.get("/openapi.json").json()
    assert "/v1/videos/{video_id}/transcript" in spec["paths"]
    request = spec["paths"]["/v1/search"]["post"]["requestBody"]["content"]
    assert "modalities" in request["application/json"]["schema"]["properties"]
    assert "modalities" in request["multipart/form-data"]["schema"]["properties"]
    assert {"matched", "snippet"} <= set(spec["components"]["schemas"]["Moment"]["properties"])
    assert (
        "text/vtt"
        in spec["paths"]["/v1/videos/{video_id}/transcript"]["get"]["responses"]["200"]["content"]
    )


def test_the_python_client_searches_by_modality_and_reads_transcripts(live, words, tmp_path):
    from PIL import Image

    from vifusion.client import Client
    from vifusion.samples import frame_at

    kitchen, _ = words
    with Client(live.url, live.cfg.api_key) as vf:
        top = vf.search("mascot Zorblax", modalities=["speech"])[0]
        assert (top["video_id"], top["matched"]) == (kitchen, ["speech"])
        assert vf.transcript(kitchen)["segments"][1]["text"] == SAID[1][2]
        assert vf.transcript(kitchen, vtt=True).startswith("WEBVTT")
        image = tmp_path / "q.png"
        Image.fromarray(frame_at(live.videos["kitchen.mp4"].path, 1.0)).save(image)
        assert vf.search(image=image, modalities=["visual"])[0]["matched"] == ["visual"]
