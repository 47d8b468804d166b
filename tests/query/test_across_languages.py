"""An English query finds what was said in another language, by its English rendering (#55
item 4), and each speech moment says the language it was said in: real embeddings, a real
shard on disk read as ``vifusion search`` reads it (``index/local.LocalShards``, no Ray), a
real SQLite catalog. Speech rows go in as ingest stores them: the catalog row (original,
language, English rendering) and a vector of the original with its rendering
(``extract/actor.Extractor._text_batches``)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from tests.query._dictionaries import write_dictd
from vifusion.catalog import open_catalog
from vifusion.cli.parser import main
from vifusion.config import Config
from vifusion.extract.backbone import load_backbone
from vifusion.index.layout import check_layout, shard_dir, shard_for
from vifusion.index.local import LocalShards
from vifusion.index.shard import Shard
from vifusion.query.ranking import bracketed, snippet_fields
from vifusion.query.searcher import Searcher
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
    # Words said alone, as Whisper base renders them: "Olho" as "Oil".
    3: [(0.0, 1.5, "Olho.", "pt", "Oil."), (2.0, 3.5, "Nariz.", "pt", "Nariz.")],
}
SHOWN = {  # video id -> its on-screen text (start, end, text): the reader gives no language
    1: [(4.0, 9.0, "Horario del tren")],
    3: [(0.0, 3.5, "Horario del tren")],  # the same Spanish words, in a Portuguese talk
}


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> SimpleNamespace:
    """A data dir holding SAID, both videos ready, and a Searcher over it (one model load)."""
    cfg = Config(data_dir=tmp_path_factory.mktemp("across-languages"))
    catalog = open_catalog(cfg)
    embedder = load_backbone(cfg)
    check_layout(cfg.data_dir, cfg.num_shards)
    shards = [Shard(n, shard_dir(cfg.data_dir, n), cfg) for n in range(cfg.num_shards)]
    for video_id, rows in SAID.items():
        got, job = catalog.add_video(f"/v/{video_id}.mp4", str(video_id))
        assert got == video_id
        catalog.put_texts(video_id, "speech", rows)
        catalog.set_video_language(video_id, rows[0][3])
        said = [" ".join(filter(None, (text, english))) for _, _, text, _, english in rows]
        spans = np.array([r[:2] for r in rows], np.float32)
        batch = FusedBatch.of_texts(video_id, "speech", 0, spans, embedder.embed_text(said))
        shards[shard_for(video_id, cfg.num_shards)].add(batch)
        if video_id in SHOWN:
            catalog.put_texts(video_id, "screen", SHOWN[video_id])
            spans = np.array([r[:2] for r in SHOWN[video_id]], np.float32)
            vectors = embedder.embed_text([text for *_, text in SHOWN[video_id]])
            batch = FusedBatch.of_texts(video_id, "screen", 0, spans, vectors)
            shards[shard_for(video_id, cfg.num_shards)].add(batch)
        catalog.update_job(job, "ready")
    read = LocalShards(cfg)  # as ``vifusion search`` reads them
    searcher = Searcher(cfg.model_copy(update={"dictionaries": ()}), read, embedder, catalog)
    yield SimpleNamespace(cfg=cfg, searcher=searcher)
    read.close()
    catalog.close()


def shown(marked: str | None, english: str | None) -> tuple[str | None, str | None]:
    """A moment's snippets as a terminal shows them: the query's words in [ ]."""
    f = snippet_fields(marked, english)
    return (
        f["snippet"] and bracketed(f["snippet"], f["highlights"]),
        f["snippet_english"] and bracketed(f["snippet_english"], f["highlights_english"]),
    )


@pytest.mark.parametrize("blend", ["rrf", "calibrated"])
def test_an_english_query_finds_the_spanish_sentence_and_shows_both(library, blend):
    top = library.searcher.text("when does the train leave the station", top_k=3, blend=blend)[0]
    assert (top.video_id, top.start_s, top.end_s) == (1, 4.0, 9.0)
    assert top.matched[0] == "speech"
    assert top.language == "es"
    assert shown(top.snippet, top.snippet_english) == (
        "El tren sale de la estación a las ocho.",
        "The [train] [leaves] the [station] at eight.",
    )


def test_a_query_in_the_language_spoken_marks_the_original(library):
    top = library.searcher.text("estacion tren", top_k=3, modalities=["speech"])[0]
    assert (top.video_id, top.start_s, top.language) == (1, 4.0, "es")
    assert (
        shown(top.snippet, top.snippet_english)[0] == "El [tren] sale de la [estación] a las ocho."
    )


def test_an_english_moment_has_no_english_rendering(library):
    top = library.searcher.text("cold mountain weather", top_k=3, modalities=["speech"])[0]
    assert (top.video_id, top.language) == (2, "en")
    assert shown(top.snippet, top.snippet_english)[1] is None


def search(library, capsys, *args: str) -> list[dict]:
    """``vifusion search --json ARGS`` on the library's data dir (no service runs: read here)."""
    assert main(["search", "--data-dir", str(library.cfg.data_dir), "--json", *args]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_the_command_line_keeps_the_languages_asked_and_says_each_moments(library, capsys):
    query = ["when does the train leave the station", "--in", "speech"]
    found = search(library, capsys, *query, "--language", "es")
    assert {r["video_id"] for r in found} == {1}
    assert (found[0]["start_s"], found[0]["language"]) == (4.0, "es")
    assert found[0]["snippet_english"] == "The train leaves the station at eight."
    assert search(library, capsys, *query, "--language", "de") == []
    query = ["cold mountain weather", "--in", "speech"]
    both = search(library, capsys, *query, "--language", "de", "--language", "en")
    assert [(r["video_id"], r["language"]) for r in both] == [(2, "en")]


def test_the_command_line_shows_the_language_and_the_english_rendering(library, capsys):
    argv = ["search", "--data-dir", str(library.cfg.data_dir), "--in", "speech", "--top-k", "1"]
    assert main([*argv, "when does the train leave the station"]) == 0
    out = capsys.readouterr().out
    assert "(es) El tren sale de la estación a las ocho." in out
    assert "(en) The [train] [leaves] the [station] at eight." in out


def with_dictionaries(library, directory) -> Searcher:
    s = library.searcher
    return Searcher(
        s.cfg.model_copy(update={"dictionaries": (directory,)}), s.shards, s.embedder, s.catalog
    )


def test_an_english_word_finds_a_word_said_alone_through_a_dictionary(library, tmp_path):
    """No word of the query is said in English, and the rendering's meaning is noise (0.25
    cosines): a dictionary puts the query in Portuguese, and the word said comes first."""
    lists = dict(library.searcher.ranked_lists("the nose", modalities=["speech"])[0])
    assert lists["speech_keyword"] == []
    write_dictd(tmp_path, "freedict-eng-por", {"eye": "olho", "nose": "nariz"})
    searcher = with_dictionaries(library, tmp_path)
    for query, start in (("the nose", 2.0), ("eyes", 0.0)):
        top = searcher.text(query, top_k=5, modalities=["speech"])[0]
        assert (top.video_id, top.start_s, top.language) == (3, start, "pt")
        assert shown(top.snippet, None)[0] == ("[Nariz]." if start else "[Olho].")


def test_a_translation_counts_only_in_the_language_it_is_in(library, tmp_path):
    """ "tren" in a German dictionary finds nothing in the Spanish talk; the English words
    still find what they did."""
    write_dictd(tmp_path, "freedict-eng-deu", {"train": "tren", "weather": "Wetter"})
    searcher = with_dictionaries(library, tmp_path)
    query = ("the train", "cold weather")
    for q in query:
        got = searcher.text(q, top_k=3, modalities=["speech"], blend="rrf")
        before = library.searcher.text(q, top_k=3, modalities=["speech"], blend="rrf")
        assert [(m.video_id, m.start_s, m.score) for m in got] == [
            (m.video_id, m.start_s, m.score) for m in before
        ]


def test_an_english_query_finds_on_screen_text_in_the_language_its_video_speaks(library, tmp_path):
    """The reader does not know a line's language: a slide is taken to be in the language its
    video speaks. "train schedule" finds "Horario del tren" on screen in the Spanish talk
    through an English-Spanish dictionary, and not the same words on screen in the
    Portuguese talk."""
    keyword = dict(library.searcher.ranked_lists("train schedule", modalities=["screen"])[0])
    assert keyword["screen_keyword"] == []
    write_dictd(tmp_path, "freedict-eng-spa", {"train": "tren", "schedule": "horario"})
    searcher = with_dictionaries(library, tmp_path)
    keyword = dict(searcher.ranked_lists("train schedule", modalities=["screen"])[0])
    assert [(c.video_id, c.start_s) for c in keyword["screen_keyword"]] == [(1, 4.0)]
    top = searcher.text("train schedule", top_k=3, modalities=["screen"])[0]
    assert (top.video_id, top.start_s) == (1, 4.0)
    assert shown(top.snippet, None)[0] == "[Horario] del [tren]"
