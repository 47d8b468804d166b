"""What is said and written in videos, in the catalog: transcripts and keyword search."""

import sqlite3

import psycopg
import pytest

from vifusion.catalog import Catalog, open_catalog
from vifusion.config import Config

TALK = [
    (0.0, 2.5, "Welcome to the quarterly budget review."),
    (2.5, 6.0, "Our mascot Zorblax approved every budget line this year."),
    (6.0, 9.0, "Questions about the budgets go to finance."),
]
SLIDES = [(1.0, 8.0, "Q3 Budget: 4,200 EUR"), (8.0, 12.0, "AC/DC live at the arena")]


@pytest.fixture
def cat(catalog) -> Catalog:
    cat = catalog.open()
    for title in ("talk", "other"):
        cat.add_video(f"/v/{title}.mp4", title)
    cat.put_texts(1, "speech", TALK)
    cat.put_texts(1, "screen", SLIDES)
    cat.put_texts(2, "speech", [(0.0, 3.0, "Nothing about money here, just the weather.")])
    return cat


def test_a_transcript_comes_back_in_time_order(cat):
    assert [(r.kind, r.n, r.start_s, r.text) for r in cat.texts(1)] == [
        ("speech", 0, 0.0, TALK[0][2]),
        ("screen", 0, 1.0, SLIDES[0][2]),
        ("speech", 1, 2.5, TALK[1][2]),
        ("speech", 2, 6.0, TALK[2][2]),
        ("screen", 1, 8.0, SLIDES[1][2]),
    ]
    assert [r.n for r in cat.texts(1, "speech")] == [0, 1, 2]
    assert cat.texts(3) == []


def test_a_made_up_word_said_once_is_found_with_its_time_and_marked(cat):
    hits = cat.keyword_search("zorblax")
    assert [(h.video_id, h.kind, h.n, h.start_s, h.end_s) for h in hits] == [
        (1, "speech", 1, 2.5, 6.0)
    ]
    assert hits[0].snippet == "Our mascot [Zorblax] approved every budget line this year."
    assert hits[0].score > 0


def test_bm25_ranks_rows_with_more_and_rarer_words_first_and_stems(cat):
    hits = cat.keyword_search("Zorblax budget", limit=10)
    # the row holding the rare word and the common one first; "budgets" matches by its stem
    assert (hits[0].video_id, hits[0].kind, hits[0].n) == (1, "speech", 1)
    assert {(h.kind, h.n) for h in hits} == {
        ("speech", 0),
        ("speech", 1),
        ("speech", 2),
        ("screen", 0),
    }
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert "[budgets]" in next(h.snippet for h in hits if h.n == 2 and h.kind == "speech")
    assert len(cat.keyword_search("budget", limit=2)) == 2


def test_search_keeps_to_the_kinds_and_videos_asked(cat):
    assert {h.kind for h in cat.keyword_search("budget", kinds=["screen"])} == {"screen"}
    assert cat.keyword_search("weather", video_ids=[1]) == []
    assert [h.video_id for h in cat.keyword_search("weather", video_ids=[2, 7])] == [2]
    assert cat.keyword_search("weather", video_ids=[]) == []
    assert cat.keyword_search("weather", kinds=[]) == []
    with pytest.raises(ValueError, match="unknown text kind"):
        cat.keyword_search("weather", kinds=["visual"])
    with pytest.raises(ValueError, match="limit"):
        cat.keyword_search("weather", limit=0)


@pytest.mark.parametrize(
    "query",
    [
        'AC/DC "live',
        "NEAR(",
        '"',
        "*",
        "-budget",
        "budget OR",
        "AND",
        "NOT zorblax",
        "text:budget",
        "^budget",
        "{budget finance}",
        "budget*",
        "'; DROP TABLE texts; --",
        "(",
        ")",
        "+",
        "\x00zorblax\x00",
        "a\tb\nc",
        "💸 budget",
        "x" * 10_000,
        " ".join(["budget"] * 500),
        "",
        "   ",
    ],
)
def test_any_query_string_is_safe(cat, query):
    hits = cat.keyword_search(query)
    assert all(h.snippet is not None for h in hits)
    assert len(cat.texts(1)) == 5  # and nothing was harmed


def test_punctuation_inside_a_word_is_a_phrase(cat):
    hits = cat.keyword_search('AC/DC "live')
    assert [(h.kind, h.n) for h in hits] == [("screen", 1)]
    assert hits[0].snippet == "[AC/DC] [live] at the arena"
    assert [h.n for h in cat.keyword_search("NOT zorblax")] == [
        1
    ]  # NOT is a word here, not an operator


def test_indexing_again_replaces_a_videos_rows(cat):
    assert cat.put_texts(1, "speech", [(0.0, 1.0, "A shorter take, no mascot.")]) == 1
    assert cat.keyword_search("zorblax") == []
    assert [h.n for h in cat.keyword_search("mascot")] == [0]
    assert len(cat.texts(1, "screen")) == 2  # the other kind is left alone
    cat.put_texts(1, "speech", [])
    assert cat.texts(1, "speech") == []


def test_a_bad_row_changes_nothing(cat):
    for bad in (
        [(0.0, 1.0, "fine"), (3.0, 2.0, "ends before it starts")],
        [(0.0, float("nan"), "x")],
        [(0.0, 1.0, None)],
    ):
        with pytest.raises(ValueError):
            cat.put_texts(1, "speech", bad)
    with pytest.raises(ValueError, match="unknown text kind"):
        cat.put_texts(1, "audio", [])
    assert [r.text for r in cat.texts(1, "speech")] == [t for _, _, t in TALK]


def test_deleting_a_video_deletes_its_text_and_keyword_index(catalog, cat):
    assert cat.delete_video(1)
    assert cat.texts(1) == [] and cat.keyword_search("budget") == []
    assert [h.video_id for h in cat.keyword_search("weather")] == [2]
    if catalog.backend == "sqlite":
        with sqlite3.connect(cat.path) as c:  # the index holds nothing of it either
            c.execute("INSERT INTO texts_fts(texts_fts, rank) VALUES ('integrity-check', 1)")
    else:  # nor the vocabulary near spellings come from
        with psycopg.connect(catalog.url) as c:
            assert c.execute(
                "SELECT count(*) FROM ts_stat('SELECT tsv FROM texts') WHERE word = 'zorblax'"
            ).fetchone() == (0,)


def test_dense_hits_get_their_text_with_the_query_words_marked(cat):
    rows = cat.texts_at(
        [(1, "speech", 1), (1, "screen", 1), (2, "speech", 0), (9, "speech", 0)],
        query="budget arena",
    )
    assert set(rows) == {(1, "speech", 1), (1, "screen", 1), (2, "speech", 0)}
    assert (
        rows[(1, "speech", 1)].snippet
        == "Our mascot Zorblax approved every [budget] line this year."
    )
    assert rows[(1, "screen", 1)].snippet == "AC/DC live at the [arena]"
    assert (
        rows[(2, "speech", 0)].snippet == "Nothing about money here, just the weather."
    )  # no query word in it
    plain = cat.texts_at([(1, "speech", 0)])
    assert plain[(1, "speech", 0)].snippet is None and plain[(1, "speech", 0)].start_s == 0.0
    assert cat.texts_at([]) == {}


def test_text_survives_reopen(catalog, cat):
    cat.close()
    again = catalog.open()
    assert [h.n for h in again.keyword_search("zorblax")] == [1]
    assert [(r.kind, r.n) for r in again.texts(1)] == [
        ("speech", 0),
        ("screen", 0),
        ("speech", 1),
        ("speech", 2),
        ("screen", 1),
    ]


def test_an_old_sqlite_catalog_gains_the_text_tables(tmp_path):
    old = tmp_path / "catalog.db"
    open_catalog(Config(data_dir=tmp_path)).close()
    with sqlite3.connect(old) as c:  # as today's code left it: no text tables
        c.executescript(
            "DROP TABLE texts_fts; DROP TABLE texts; DROP TABLE schema_version;"
            " ALTER TABLE jobs DROP COLUMN lease_owner; ALTER TABLE jobs DROP COLUMN lease_until;"
            " ALTER TABLE jobs DROP COLUMN attempts;"
        )
        c.execute(
            "INSERT INTO videos (source, title, status, created_at) VALUES ('/v/a.mp4', 'a', 'ready', 0)"
        )
    upgraded = open_catalog(Config(data_dir=tmp_path))
    assert upgraded.get_video(1).status == "ready" and upgraded.texts(1) == []
    upgraded.put_texts(1, "screen", [(0.0, 1.0, "Zorblax")])
    assert [h.video_id for h in upgraded.keyword_search("zorblax")] == [1]


def test_vacuum_keeps_the_keyword_index_on_its_rows(catalog, cat):
    """The index is keyed by an explicit id, which VACUUM keeps (SQLite's documents allow it
    to renumber an implicit rowid; PostgreSQL's VACUUM FULL rewrites the tables)."""
    cat.put_texts(1, "speech", [(0.0, 1.0, "first take")])
    cat.put_texts(1, "speech", TALK)
    if catalog.backend == "sqlite":
        with sqlite3.connect(cat.path) as c:
            c.execute("VACUUM")
    else:
        with psycopg.connect(catalog.url, autocommit=True) as c:
            c.execute("VACUUM FULL")
    assert [(h.n, h.text) for h in cat.keyword_search("zorblax")] == [(1, TALK[1][2])]


@pytest.fixture
def heard(catalog) -> Catalog:
    """Speech as a model wrote it down: the made-up name "Zorblax" spelt as it sounded."""
    cat = catalog.open()
    cat.add_video("/v/a.mp4", "a")
    cat.put_texts(
        1,
        "speech",
        [
            (0.0, 2.0, "Our mascot is called Lorblax, and everyone loved it."),
            (2.0, 4.0, "The mascot costume is blue."),
            (4.0, 6.0, "Lorblax again, this time on the stage."),
            (6.0, 8.0, "Room 4200 is booked for the review."),
        ],
    )
    cat.put_texts(1, "screen", [(0.0, 8.0, "Zorbla Industries")])
    return cat


def test_an_unknown_word_finds_its_near_spellings_at_a_lower_weight(heard):
    hits = heard.keyword_search("Zorblax")
    # "lorblax" and "zorbla" are one edit away: found, and marked where they matched
    assert {(h.kind, h.n) for h in hits} == {("screen", 0), ("speech", 0), ("speech", 2)}
    said = next(h for h in hits if (h.kind, h.n) == ("speech", 0))
    assert said.snippet == "Our mascot is called [Lorblax], and everyone loved it."
    assert said.coverage == pytest.approx(0.5)
    # a near match counts half of an exact one
    exact = next(h for h in heard.keyword_search("Lorblax") if h.n == 0)
    assert said.score == pytest.approx(exact.score / 2) and exact.coverage == 1.0
    assert heard.keyword_search("Zorblax", fuzzy=False) == []


def test_only_the_nearest_spellings_are_searched(heard):
    heard.put_texts(1, "screen", [(0.0, 8.0, "Morablex merchandise")])  # three edits from "zorblax"
    assert {(h.kind, h.n) for h in heard.keyword_search("Zorblax")} == {
        ("speech", 0),
        ("speech", 2),
    }
    heard.put_texts(1, "speech", [(0.0, 2.0, "Nothing like the name here.")])
    assert [(h.kind, h.n) for h in heard.keyword_search("Zorblax")] == [
        ("screen", 0)
    ]  # the nearest now


def test_near_spellings_add_to_exact_matches(heard):
    hits = heard.keyword_search("Zorblax mascot", kinds=["speech"])
    assert hits[0].n == 0  # the near name and the exact word
    assert {h.n: h.coverage for h in hits} == pytest.approx({0: 0.75, 1: 0.5, 2: 0.25})


@pytest.mark.parametrize(
    "query",
    [
        "Zorbaxxxx",  # three edits: too far for a word of 9 letters
        "Lorb",  # a word of four letters gets one edit; "lorblax" is three away
        "4201",  # numbers are exact: room 4201 is not room 4200
        "Zor",  # under four letters: exact only
    ],
)
def test_what_near_spellings_do_not_reach(heard, query):
    assert heard.keyword_search(query) == []


def test_a_word_the_index_holds_is_not_widened(heard):
    heard.put_texts(1, "screen", [(0.0, 1.0, "Clue: the glue dries")])
    # "blue" is in the index: only its own rows, not "clue" or "glue" one edit away
    assert [(h.kind, h.n) for h in heard.keyword_search("blue")] == [("speech", 1)]
    assert [(h.kind, h.n) for h in heard.keyword_search("blux")] == [
        ("speech", 1)
    ]  # not in it: widened


def test_dense_hits_are_marked_where_a_near_spelling_matched(heard):
    rows = heard.texts_at([(1, "speech", 2)], query="Zorblax")
    assert rows[(1, "speech", 2)].snippet == "[Lorblax] again, this time on the stage."
