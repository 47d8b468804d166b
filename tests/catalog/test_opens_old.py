"""A catalog an earlier release wrote opens as it is, on each database: the same videos,
jobs, texts and keyword answers as that release gave, read-only (the file left as it was)
and for writing (ids and the job queue carrying on). The fixtures are that release's
(tests/catalog/_make_fixture.py says how they were made)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests._postgres import CatalogPlace, binaries
from tests.catalog._make_fixture import FIXTURES, answers

STORED = json.loads((FIXTURES / "answers.json").read_text())


@pytest.fixture(params=["sqlite", "postgres"])
def old(request, tmp_path):
    """The fixture catalog, copied into the test's data dir or restored into a fresh database."""
    if request.param == "sqlite":
        place = CatalogPlace("sqlite", tmp_path)
        shutil.copyfile(FIXTURES / "catalog.db", place.path)
    else:
        place = CatalogPlace("postgres", tmp_path, request.getfixturevalue("postgres_url"))
        # Not ON_ERROR_STOP: a SET an older server lacks is harmless, and a missing row is
        # what the tests look for.
        subprocess.run(
            [str(binaries() / "psql"), "-X", "-q", "-d", place.url, "-f", FIXTURES / "catalog.sql"],
            check=True,
            capture_output=True,
        )
    yield place
    place.close()


def test_an_old_catalog_answers_as_its_release_did_and_is_left_as_it_was(old):
    before = old.path.read_bytes() if old.backend == "sqlite" else None
    reader = old.open(read_only=True)
    assert answers(reader) == STORED[old.backend]
    reader.close()
    if before is not None:
        assert old.path.read_bytes() == before


def test_an_old_catalog_opened_for_writing_carries_on(old):
    cat = old.open()
    stored = STORED[old.backend]
    assert answers(cat) == stored
    # Every video from before collections is in "default", and found there.
    ids = [v["id"] for v in stored["videos"]]
    assert {v.collection for v in cat.list_videos()} == {"default"}
    assert [v.id for v in cat.list_videos(collections=["default"])] == ids
    assert [(c.name, c.videos) for c in cat.collections()] == [("default", len(ids))]
    assert cat.ready_ids(collections=["elsewhere"]) == set()
    vid, job = cat.add_video("/videos/new.mp4", "New")
    assert vid == max(v["id"] for v in stored["videos"]) + 1
    # The oldest job left running under a lease long run out is taken first, once more.
    running = next(j for j in stored["jobs"] if j["status"] == "decoding")
    taken = cat.lease_job("worker-d/1", 30.0)
    assert (taken.id, taken.status, taken.attempts) == (running["id"], "decoding", 2)
    with cat.holding("worker-d/1"):
        cat.put_texts(taken.video_id, "speech", [(0.0, 1.0, "a brand new budget")])
        assert cat.update_job(taken.id, "ready", frames_indexed=7)
    assert cat.get_video(taken.video_id).status == "ready"
    assert [h.video_id for h in cat.keyword_search("brand")] == [taken.video_id]
    assert cat.get_job(job).status == "queued"
