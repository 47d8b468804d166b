"""Speech and screen text through real ingest in the live service (see conftest.py): a talk
with espeak-ng speech and slides of text is uploaded, transcribed by tiny.en, read by
RapidOCR, and found by what it says and shows."""

from __future__ import annotations

import pytest

from tests.serve.test_words import parse_webvtt, search
from vifusion.query.ranking import bracketed

TALK_SAID = [
    (0.5, "Our new mascot is called Zorblax, and everyone loves it."),
    (7.0, "Next we discuss the migration of the billing service."),
]
TALK_SHOWN = [
    (0.0, 6.0, ["Quarterly review"]),
    (6.0, 12.0, ["Hiring plan: three engineers in Porto"]),
]


@pytest.fixture(scope="module")
def talk(live, tmp_path_factory):
    """A talk (espeak-ng speech, slides) uploaded and indexed by the live service: its id and
    what was said and shown when."""
    from vifusion.samples import talks as _talks

    if not _talks.have_espeak():
        pytest.skip(
            "espeak-ng is not installed (Debian: apt-get install espeak-ng): no talk to index"
        )
    made = _talks.write_talk(
        tmp_path_factory.mktemp("talk") / "talk.mp4", 12.0, said=TALK_SAID, shown=TALK_SHOWN
    )
    accepted = live.vf.upload(made.path)
    assert live.vf.wait(accepted["job_id"])["status"] == "ready"
    video_id = accepted["video_id"]
    heard = live.vf.transcript(video_id)["segments"]
    print("tiny.en wrote:", [s["text"] for s in heard])
    yield video_id, made
    live.client.delete(f"/v1/videos/{video_id}")


def overlaps(m: dict, start_s: float, end_s: float) -> bool:
    return m["start_s"] < end_s and start_s < m["end_s"]


def test_ingested_speech_and_screen_text_are_found_where_they_are(live, talk):
    video_id, made = talk
    said, shown = made.said[1], made.shown[1]
    top = search(live, text="the migration of the billing service", top_k=3)[0]
    assert top["video_id"] == video_id and overlaps(top, said.start_s, said.end_s), top
    assert "speech" in top["matched"] and "[billing]" in bracketed(
        top["snippet"], top["highlights"]
    )
    top = search(live, text="hiring engineers in Porto", top_k=3)[0]
    assert top["video_id"] == video_id and overlaps(top, shown.start_s, shown.end_s), top
    assert "screen" in top["matched"] and "[Porto]" in bracketed(top["snippet"], top["highlights"])
    # said only: not found where only screen text is searched
    for m in search(
        live, text="the migration of the billing service", top_k=10, modalities=["screen"]
    ):
        assert m["matched"] == ["screen"] and "[billing]" not in bracketed(
            m["snippet"], m["highlights"]
        )


def test_a_made_up_name_said_once_is_found_by_keyword(live, talk):
    video_id, made = talk
    said = made.said[0]
    segments = live.client.get(f"/v1/videos/{video_id}/transcript").json()["segments"]
    heard = next(
        s["text"] for s in segments if s["start_s"] < said.end_s and said.start_s < s["end_s"]
    )
    print(f"said {said.text!r}; tiny.en wrote {heard!r}")
    top = search(live, text="Zorblax", top_k=3, modalities=["speech"])[0]
    assert top["video_id"] == video_id and overlaps(top, said.start_s, said.end_s), top
    assert top["highlights"], (
        top
    )  # its words were marked: the keyword index matched, by a near spelling


def test_the_transcript_of_an_ingested_talk(live, talk):
    video_id, _ = talk
    said = live.client.get(f"/v1/videos/{video_id}/transcript").json()["segments"]
    assert [s["kind"] for s in said] == ["speech"] * len(said) and any(
        "billing" in s["text"] for s in said
    )
    shown = live.client.get(f"/v1/videos/{video_id}/transcript", params={"kind": "screen"}).json()[
        "segments"
    ]
    assert any("Porto" in s["text"] for s in shown)
    cues = parse_webvtt(
        live.client.get(
            f"/v1/videos/{video_id}/transcript", params={"kind": "all", "format": "vtt"}
        ).text
    )
    assert len(cues) == len(said) + len(shown)
