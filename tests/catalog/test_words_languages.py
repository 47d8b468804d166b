"""Keyword search in the language spoken, on SQLite and PostgreSQL alike: accents folded both
ways, Chinese, Japanese and Thai words found inside text written without spaces, and an
English query finding a Spanish row by its English rendering (#55 items 3 and 4)."""

import contextlib
import shutil
import sqlite3

import pytest

from vifusion.catalog import Catalog
from vifusion.catalog._schema import SQLITE_MIGRATIONS, migrate_sqlite
from vifusion.catalog._sqlite import SqliteCatalog

SPANISH = "Nos vemos mañana en la estación del norte."
SPANISH_EN = "See you tomorrow at the north station."
GERMAN = "Die Übersetzung kommt nächste Woche."
VIETNAMESE = "Chúng tôi sống ở Việt Nam."
CHINESE = "我们明天在北京大学见面。"
JAPANESE = "東京タワーは夜にきれいです。"
THAI = "เราจะไปตลาดน้ำ"


@pytest.fixture
def cat(catalog) -> Catalog:
    cat = catalog.open()
    for title in ("es", "de", "vi", "zh", "ja", "th", "en"):
        cat.add_video(f"/v/{title}.mp4", title)
    cat.put_texts(1, "speech", [(0.0, 3.0, SPANISH, "es", SPANISH_EN)])
    cat.put_texts(2, "speech", [(0.0, 3.0, GERMAN, "de", "The translation comes next week.")])
    cat.put_texts(3, "speech", [(0.0, 3.0, VIETNAMESE, "vi", None)])
    cat.put_texts(4, "speech", [(0.0, 3.0, CHINESE, "zh", None)])
    cat.put_texts(5, "screen", [(0.0, 3.0, JAPANESE)])
    cat.put_texts(6, "speech", [(0.0, 3.0, THAI, "th", None)])
    cat.put_texts(7, "speech", [(0.0, 3.0, "The station is closed tomorrow.", "en", None)])
    return cat


def found(cat: Catalog, query: str) -> list[int]:
    return [r.video_id for r in cat.keyword_search(query)]


@pytest.mark.parametrize(
    "query, video",
    [
        ("manana", 1),  # without its accent
        ("MAÑANA", 1),
        ("estacion", 1),
        ("Ubersetzung", 2),
        ("ubersetzung", 2),
        ("Viet", 3),  # two diacritics on one letter
        ("nächste", 2),
    ],
)
def test_accents_are_folded_both_ways(cat, query, video):
    assert found(cat, query) == [video]


def test_a_word_with_an_accent_finds_the_word_written_without(cat):
    cat.put_texts(7, "screen", [(0.0, 1.0, "Cafe Munchen")])
    assert found(cat, "Café") == [7]
    assert found(cat, "München") == [7]


@pytest.mark.parametrize(
    "query, video, snippet",
    [
        ("北京", 4, "我们明天在[北京]大学见面。"),
        ("北京大学", 4, "我们明天在[北京大学]见面。"),
        ("明天", 4, "我们[明天]在北京大学见面。"),
        ("タワー", 5, "東京[タワー]は夜にきれいです。"),
        ("東京", 5, "[東京]タワーは夜にきれいです。"),
        ("ตลาด", 6, "เราจะไป[ตลาด]น้ำ"),
    ],
)
def test_words_of_scripts_without_spaces_are_found_and_marked(cat, query, video, snippet):
    hits = cat.keyword_search(query)
    assert [(h.video_id, h.snippet) for h in hits] == [(video, snippet)]
    # The transcript is the text as spoken: nothing the index added shows.
    assert cat.texts(video)[0].text in (CHINESE, JAPANESE, THAI)


def test_characters_out_of_order_are_not_the_word(cat):
    assert found(cat, "京北") == []


def test_an_english_query_finds_the_spanish_sentence_by_its_english_rendering(cat):
    hits = cat.keyword_search("tomorrow station")
    assert sorted(h.video_id for h in hits) == [1, 7]
    spanish = next(h for h in hits if h.video_id == 1)
    assert (spanish.language, spanish.text, spanish.english) == ("es", SPANISH, SPANISH_EN)
    assert spanish.snippet == SPANISH  # the original, whole: none of its words matched
    assert spanish.snippet_english == "See you [tomorrow] at the north [station]."
    assert spanish.coverage == 1.0
    english = next(h for h in hits if h.video_id == 7)
    assert english.snippet_english is None
    # A row's text and its rendering both answer, and both are shown marked.
    marked = cat.texts_at([(1, "speech", 0)], query="mañana tomorrow")[(1, "speech", 0)]
    assert marked.snippet == "Nos vemos [mañana] en la estación del norte."
    assert marked.snippet_english == "See you [tomorrow] at the north station."


def test_the_languages_spoken_are_counted_over_ready_videos(cat):
    assert cat.spoken_languages() == {}
    for video_id, language in ((1, "es"), (2, "de"), (3, "es"), (4, None), (5, "fr")):
        cat.set_video_language(video_id, language)
    for job in cat.latest_jobs([1, 2, 3, 4]).values():
        cat.update_job(job.id, "ready")
    assert cat.spoken_languages() == {"es": 2, "de": 1}  # video 5 is not ready
    assert cat.spoken_languages([2, 4]) == {"de": 1}
    assert cat.spoken_languages([]) == {}
    assert cat.spoken_languages(collections=["default"]) == {"es": 2, "de": 1}
    assert cat.spoken_languages(collections=["other"]) == {}


def test_the_language_and_the_rendering_come_back_in_the_transcript(cat):
    (row,) = cat.texts(1)
    assert (row.language, row.english) == ("es", SPANISH_EN)
    (slide,) = cat.texts(5)
    assert (slide.language, slide.english) == (None, None)


def test_a_catalog_indexed_before_languages_is_indexed_again_when_opened(tmp_path):
    """Rows an older release indexed (Chinese as one long token) are found by their words
    once the catalog is opened for writing."""
    path = tmp_path / "catalog.db"
    migrate_sqlite(path, SQLITE_MIGRATIONS[:4])
    with contextlib.closing(sqlite3.connect(path)) as c, c:
        c.execute(
            "INSERT INTO videos (source, title, status, created_at) VALUES ('/v', 'v', 'ready', 1)"
        )
        c.execute(
            "INSERT INTO texts (video_id, kind, n, start_s, end_s, text)"
            " VALUES (1, 'speech', 0, 0, 1, ?)",
            (CHINESE,),
        )
        assert (
            c.execute("SELECT count(*) FROM texts_fts WHERE texts_fts MATCH '北京'").fetchone()[0]
            == 0
        )  # as that release indexed it
    backup = tmp_path / "before.db"
    shutil.copyfile(path, backup)
    reader = SqliteCatalog(backup, read_only=True)  # a reader leaves it as it is, and answers
    assert [r.text for r in reader.texts(1)] == [CHINESE]
    reader.close()
    cat = SqliteCatalog(path)
    assert [(h.video_id, h.snippet) for h in cat.keyword_search("北京")] == [
        (1, "我们明天在[北京]大学见面。")
    ]
    cat.close()


def test_text_of_the_videos_speaking_a_language(cat):
    """``spoken_in`` keeps the rows of videos whose language is the one asked: how on-screen
    text, which carries no language of its own, is searched in its video's."""
    cat.put_texts(2, "screen", [(0.0, 3.0, "Bahnhof Nord")])
    cat.put_texts(7, "screen", [(0.0, 3.0, "Bahnhof Nord")])
    cat.set_video_language(2, "de")
    cat.set_video_language(7, "en")
    assert sorted(found(cat, "bahnhof")) == [2, 7]
    assert [r.video_id for r in cat.keyword_search("bahnhof", spoken_in="de")] == [2]
    assert cat.keyword_search("bahnhof", spoken_in="es") == []
    assert [r.video_id for r in cat.keyword_search("bahnhof", [], spoken_in="de")] == []
