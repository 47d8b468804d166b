"""One text query over what is seen, said and written: real embeddings (EfficientNet-Lite0,
ConSE, all-MiniLM-L6-v2), real shards on Ray, a real SQLite catalog. Speech and screen text
go in as ingest stores them (catalog rows and their vectors), so each modality can be
placed exactly."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import ray

from vifusion.config import Config
from vifusion.query.ranking import bracketed, snippet_fields
from vifusion.runtime import Runtime
from vifusion.samples import photo
from vifusion.samples import talks as _talks
from vifusion.types import FusedBatch

TALK = {  # video 1: a talk, its slides on screen
    "speech": [
        (0.0, 4.0, "Welcome to the quarterly review of the Lisbon office."),
        (4.0, 9.0, "Our mascot is called Lorblax, and everyone loved it."),
        (9.0, 14.0, "Next we discuss the migration of the billing service."),
    ],
    "screen": [
        (0.0, 9.0, "Quarterly review"),
        (14.0, 20.0, "Hiring plan: three engineers in Porto"),
    ],
}
OTHER = {  # video 3: another talk, about something else
    "speech": [(0.0, 5.0, "The weather in the mountains was cold and windy all week.")],
    "screen": [(0.0, 5.0, "Mountain weather report")],
}


@dataclass
class World:
    rt: Runtime
    talk: int
    kitchen: int
    other: int


def _frames(rt: Runtime, video_id: int, pictures: list[np.ndarray]) -> FusedBatch:
    """One sampled frame a second, each ``pictures[i]`` shown over [i, i + 1)."""
    pairs = [rt.searcher.embedder.embed_frames(p[None]) for p in pictures]
    spans = np.array([[i, i + 1] for i in range(len(pictures))], np.float32)
    return FusedBatch.of_video(
        video_id,
        0,
        spans,
        np.concatenate([p[0] for p in pairs]),
        np.concatenate([p[1] for p in pairs]),
    )


def _texts(
    rt: Runtime, video_id: int, kind: str, rows: list[tuple[float, float, str]]
) -> FusedBatch:
    rt.catalog.put_texts(video_id, kind, rows)
    vectors = rt.searcher.embedder.embed_text([t for _, _, t in rows])
    return FusedBatch.of_texts(video_id, kind, 0, np.array([[a, b] for a, b, _ in rows]), vectors)


@pytest.fixture(scope="module")
def world(ray_session, tmp_path_factory) -> World:
    cfg = Config(data_dir=tmp_path_factory.mktemp("search-text"), faiss_threads=1)
    with Runtime(cfg) as rt:
        ids = [
            rt.catalog.add_video(f"/v/{name}.mp4", name)[0] for name in ("talk", "kitchen", "other")
        ]
        talk, kitchen, other = ids
        slide, blank = _talks.slide(["Quarterly review"]), _talks.slide([])
        hiring = _talks.slide(["Hiring plan: three engineers in Porto"])
        batches = [
            _frames(rt, talk, [slide] * 9 + [blank] * 5 + [hiring] * 6),
            _texts(rt, talk, "speech", TALK["speech"]),
            _texts(rt, talk, "screen", TALK["screen"]),
            _frames(rt, kitchen, [photo("chelsea")] * 5 + [photo("coffee")] * 5),
            _frames(rt, other, [_talks.slide(["Mountain weather report"])] * 5),
            _texts(rt, other, "speech", OTHER["speech"]),
            _texts(rt, other, "screen", OTHER["screen"]),
        ]
        ray.get([rt.shards.handle_for(int(b.ids[0]) >> 24).add.remote(b) for b in batches])
        yield World(rt, talk, kitchen, other)


def spans(found) -> list[tuple[int, float, float]]:
    return [(m.video_id, m.start_s, m.end_s) for m in found]


def show(marked: str) -> str:
    """A library snippet (words marked with ranking.MARKS) with the marked words in [ ]."""
    fields = snippet_fields(marked)
    return bracketed(fields["snippet"], fields["highlights"])


@pytest.mark.parametrize("blend", ["rrf", "calibrated"])
def test_a_spoken_phrase_finds_where_it_was_said(world, blend):
    top = world.rt.searcher.text("the migration of the billing service", top_k=3, blend=blend)[0]
    assert (top.video_id, top.start_s, top.end_s) == (world.talk, 9.0, 14.0)
    assert top.matched[0] == "speech"
    assert show(top.snippet) == "Next we discuss the [migration] of the [billing] [service]."


@pytest.mark.parametrize("blend", ["rrf", "calibrated"])
def test_a_written_phrase_finds_where_it_was_shown(world, blend):
    top = world.rt.searcher.text("hiring plan for engineers in Porto", top_k=3, blend=blend)[0]
    assert (top.video_id, top.start_s, top.end_s) == (world.talk, 14.0, 20.0)
    assert top.matched[0] == "screen"
    assert show(top.snippet) == "[Hiring] [plan]: three [engineers] in [Porto]"


def test_a_visual_query_finds_the_scene_and_carries_no_words(world):
    top = world.rt.searcher.text("a cat", top_k=3)[0]
    assert top.video_id == world.kitchen and top.start_s < 5.0
    assert (top.matched, top.snippet) == (["visual"], None)


def test_a_name_the_speech_model_misspelt_is_found_by_its_near_spelling(world):
    top = world.rt.searcher.text("Zorblax", top_k=3, modalities=["speech"])[0]
    assert (top.video_id, top.start_s, top.end_s) == (world.talk, 4.0, 9.0)
    assert show(top.snippet) == "Our mascot is called [Lorblax], and everyone loved it."


def test_modalities_restrict_what_is_searched(world):
    said = "the migration of the billing service"
    written = world.rt.searcher.text(said, top_k=10, modalities=["screen"])
    assert (world.talk, 9.0, 14.0) not in spans(written)
    assert all(m.matched == ["screen"] for m in written)
    seen = world.rt.searcher.text(said, top_k=10, modalities=["visual"])
    assert all(m.matched == ["visual"] and m.snippet is None for m in seen)
    with pytest.raises(ValueError, match="modalities"):
        world.rt.searcher.text(said, modalities=["smell"])
    with pytest.raises(ValueError, match="modalities"):
        world.rt.searcher.text(said, modalities=[])


def test_a_video_filter_applies_to_every_modality(world):
    found = world.rt.searcher.text(
        "the migration of the billing service", top_k=20, videos=[world.kitchen, world.other]
    )
    assert {m.video_id for m in found} <= {world.kitchen, world.other}
    assert (
        world.rt.searcher.text("a cup of coffee", top_k=5, videos=[world.other, world.kitchen])[
            0
        ].video_id
        == world.kitchen
    )
    assert world.kitchen not in {
        m.video_id
        for m in world.rt.searcher.text(
            "a cup of coffee", top_k=20, videos=[world.talk, world.other]
        )
    }
    assert world.talk not in {
        m.video_id
        for m in world.rt.searcher.text("Porto", top_k=5, videos=[world.other, world.kitchen])
    }


def test_group_by_video_and_frame(world):
    by_video = world.rt.searcher.text("quarterly review", top_k=10, group_by="video")
    ids = [m.video_id for m in by_video]
    assert ids[0] == world.talk and len(ids) == len(set(ids))
    frames = world.rt.searcher.text("a cup of coffee", top_k=5, group_by="frame")
    assert frames[0].video_id == world.kitchen and frames[0].end_s - frames[0].start_s == 1.0


@pytest.mark.parametrize(
    "query",
    [
        '"',
        "NEAR(",
        "*",
        "billing*",
        "-service",
        "AND OR NOT",
        "x" * 1000,
        "'; DROP TABLE texts; --",
        "💸",
        "to be or not to be",
    ],
)
def test_any_query_string_is_a_search(world, query):
    world.rt.searcher.text(query, top_k=5)
    assert len(world.rt.catalog.texts(world.talk)) == 5  # and nothing was harmed


def test_a_query_with_a_nul_is_refused(world):
    with pytest.raises(ValueError, match="text query: contains a NUL character"):
        world.rt.searcher.text("\x00billing", top_k=5)


def test_text_names_screen_and_unknown_modalities_are_refused():
    from vifusion.query.searcher import check_modalities

    assert check_modalities(["text", "visual"]) == ("visual", "screen")
    with pytest.raises(ValueError):
        check_modalities(["smell"])
    with pytest.raises(ValueError):
        check_modalities([{}])


@pytest.mark.parametrize(
    "query", ["quarterly review", "a dog on a beach", "the migration of the billing service"]
)
def test_moments_unrelated_to_the_query_are_not_listed(world, query):
    """Calibrated 0 means no list found the moment related: listing it (as 'visual') is noise."""
    found = world.rt.searcher.text(query, top_k=20, group_by="video")
    assert all(m.score > 0 for m in found), [(m.video_id, m.matched, m.score) for m in found]
