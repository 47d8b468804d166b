"""An English query finds what was said in another language, by its English rendering (#55
item 4): real embeddings, real shards on Ray, a real SQLite catalog. Speech rows go in as
ingest stores them: the catalog row (original, language, English rendering) and a vector of
the original with its rendering (``extract/actor.Extractor._text_batches``)."""

from __future__ import annotations

import numpy as np
import pytest
import ray

from vifusion.config import Config
from vifusion.query.ranking import bracketed, snippet_fields
from vifusion.runtime import Runtime
from vifusion.types import FusedBatch

SAID = {  # video id -> its speech rows (start, end, text, language, english)
    1: [
        (0.0, 4.0, "Buenos días a todos.", "es", "Good morning everyone."),
        (
            4.0,
            9.0,
            "El tren sale de la estación a las ocho.",
            "es",
            "The train leaves the station at eight.",
        ),
    ],
    2: [(0.0, 5.0, "The weather in the mountains was cold all week.", "en", None)],
}


@pytest.fixture(scope="module")
def rt(ray_session, tmp_path_factory) -> Runtime:
    cfg = Config(data_dir=tmp_path_factory.mktemp("across-languages"), faiss_threads=1)
    with Runtime(cfg) as rt:
        batches = []
        for video_id, rows in SAID.items():
            assert rt.catalog.add_video(f"/v/{video_id}.mp4", str(video_id))[0] == video_id
            rt.catalog.put_texts(video_id, "speech", rows)
            said = [" ".join(filter(None, (text, english))) for _, _, text, _, english in rows]
            spans = np.array([r[:2] for r in rows], np.float32)
            vectors = rt.searcher.embedder.embed_text(said)
            batches.append(FusedBatch.of_texts(video_id, "speech", 0, spans, vectors))
        ray.get([rt.shards.handle_for(int(b.ids[0]) >> 24).add.remote(b) for b in batches])
        yield rt


def shown(marked: str | None, english: str | None) -> tuple[str | None, str | None]:
    """A moment's snippets as a terminal shows them: the query's words in [ ]."""
    f = snippet_fields(marked, english)
    return (
        f["snippet"] and bracketed(f["snippet"], f["highlights"]),
        f["snippet_english"] and bracketed(f["snippet_english"], f["highlights_english"]),
    )


@pytest.mark.parametrize("blend", ["rrf", "calibrated"])
def test_an_english_query_finds_the_spanish_sentence_and_shows_both(rt, blend):
    top = rt.searcher.text("when does the train leave the station", top_k=3, blend=blend)[0]
    assert (top.video_id, top.start_s, top.end_s) == (1, 4.0, 9.0)
    assert top.matched[0] == "speech"
    assert shown(top.snippet, top.snippet_english) == (
        "El tren sale de la estación a las ocho.",
        "The [train] [leaves] the [station] at eight.",
    )


def test_a_query_in_the_language_spoken_marks_the_original(rt):
    top = rt.searcher.text("estacion tren", top_k=3, modalities=["speech"])[0]
    assert (top.video_id, top.start_s) == (1, 4.0)
    assert (
        shown(top.snippet, top.snippet_english)[0] == "El [tren] sale de la [estación] a las ocho."
    )


def test_an_english_moment_has_no_english_rendering(rt):
    top = rt.searcher.text("cold mountain weather", top_k=3, modalities=["speech"])[0]
    assert top.video_id == 2
    assert shown(top.snippet, top.snippet_english)[1] is None
