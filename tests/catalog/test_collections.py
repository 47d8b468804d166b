"""Collections in the catalog, on each database: a video is added to one (``default`` when
not named), listed and filtered by it, counted per collection; a bad name is refused; a key
may be limited to some, and keeps that list."""

from __future__ import annotations

import pytest

from vifusion.catalog import Collection


def test_videos_are_in_one_collection_and_filtered_by_it(catalog):
    cat = catalog.open()
    a1, j1 = cat.add_video("/v/a1.mp4", "a1", collection="team-a")
    b1, _ = cat.add_video("/v/b1.mp4", "b1", collection="team_b")
    d1, _ = cat.add_video("/v/d1.mp4", "d1")
    assert cat.update_job(j1, "ready", frames_indexed=12)
    assert [cat.get_video(i).collection for i in (a1, b1, d1)] == ["team-a", "team_b", "default"]
    assert [v.id for v in cat.list_videos(collections=["team-a", "default"])] == [a1, d1]
    assert cat.list_videos(collections=[]) == []
    assert cat.ready_ids(collections=["team-a"]) == {a1}
    assert cat.ready_ids(collections=["team_b"]) == set()  # b1 is not ready
    assert cat.collections() == [
        Collection("default", 1, 0),
        Collection("team-a", 1, 12),
        Collection("team_b", 1, 0),
    ]
    assert cat.collections(["team_b", "nowhere"]) == [Collection("team_b", 1, 0)]
    assert cat.collection_video_ids("team-a") == [a1]


@pytest.mark.parametrize("name", ["", "Team", "-a", "a/b", "a b", "x" * 65, "ü"])
def test_a_collection_name_is_a_slug(catalog, name):
    cat = catalog.open()
    with pytest.raises(ValueError, match="collection"):
        cat.add_video("/v/x.mp4", "x", collection=name)
    assert cat.list_videos() == []


def test_a_key_keeps_the_collections_it_is_limited_to(catalog):
    cat = catalog.open()
    limited, _ = cat.create_key("search", collections=["team-a", "team-b", "team-a"])
    everywhere, _ = cat.create_key("admin")
    assert limited.collections == ("team-a", "team-b")
    assert cat.api_key(limited.id).collections == ("team-a", "team-b")
    assert cat.api_key(everywhere.id).collections is None
    with pytest.raises(ValueError, match="at least one"):
        cat.create_key("search", collections=[])
    with pytest.raises(ValueError, match="collection"):
        cat.create_key("search", collections=["Bad Name"])
