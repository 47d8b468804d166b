"""Makes tests/catalog/fixtures/: a catalog on each database as a release wrote it, for
test_opens_old.py to open with the code of today. Run once, with the release whose data
must keep opening (it was run at adc730d, before the catalog became one interface):

    .venv/bin/python -m tests.catalog._make_fixture

It writes ``catalog.db`` (a SQLite data dir's catalog), ``catalog.sql`` (``pg_dump
--no-owner`` of a PostgreSQL catalog holding the same), and ``answers.json``: what that
release's catalog answered on each (``answers``), which the test asks again. Never run it
again to make a failing test pass: the fixtures are the old release's, and a new release
must read them as they are.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).with_name("fixtures")
# Keyword queries: exact words, a phrase, a number, a near spelling no row holds, nothing.
QUERIES = ["budget", "finance team", "4200", "zorblax", "blorblax", "knife sharpening", "absent"]
# Metadata filters, each a ready_ids call (1 is not true, nor "1").
FILTERS: list[dict[str, Any]] = [{}, {"team": "red"}, {"year": 2024}, {"public": True}, {"n": 1}]

KITCHEN_SAID = [
    (0.0, 3.0, "Welcome to the kitchen; today: knife sharpening."),
    (3.0, 6.5, "Hold the knife at fifteen degrees."),
    (6.5, 9.0, "Our mascot Zorblax approves."),
]
BUDGET_SAID = [
    (0.0, 5.0, "The quarterly budget review, budgets and more budgets."),
    (5.0, 9.0, "Lorblax, as the captions spelt him, met the finance team."),
    (9.0, 14.0, "The finance team meets on Tuesday in room 4200."),
]


def fill(cat: Any) -> None:
    """Videos in every job state, one run twice, with speech and screen text."""
    kitchen, k_job = cat.add_video(
        "/videos/kitchen.mp4",
        "Kitchen",
        {"team": "red", "year": 2024, "public": True, "n": 1},
        sha256="a" * 64,
        size_bytes=98765,
    )
    cat.set_video_info(kitchen, 12.5, 25.0, 640, 360)
    cat.put_texts(kitchen, "speech", KITCHEN_SAID)
    cat.put_texts(kitchen, "screen", [(0.0, 4.0, "KNIFE SKILLS 101"), (8.0, 12.0, "room 4200")])
    cat.update_job(k_job, "ready", frames_indexed=40, warnings=["audio: 2 s of silence skipped"])

    budget, b_job = cat.add_video(
        "https://example.com/budget.mp4", "Budget review", {"team": "blue", "year": 2023, "n": "1"}
    )
    cat.set_media(budget, Path("/data/media/" + "b" * 32 + "/budget.mp4"), "c" * 64, 123456)
    cat.set_video_info(budget, 30.0, 30.0, 1280, 720)
    cat.put_texts(budget, "speech", BUDGET_SAID)
    cat.put_texts(budget, "screen", [(1.0, 6.0, "Budget 2024: finance")])
    cat.update_job(b_job, "ready", frames_indexed=90)

    broken, _ = cat.add_video("/videos/broken.mp4", "Broken", {"team": "red", "year": 2022})
    taken = cat.lease_job("worker-a/1", 30.0)
    assert taken.video_id == broken
    with cat.holding("worker-a/1"):
        cat.update_job(taken.id, "failed", error="cannot decode frame 3", stage="frames")

    cat.add_video("/videos/running.mp4", "Running")
    cat.add_video("/videos/indexing.mp4", "Indexing", {"public": False})
    cat.add_video("/videos/queued.mp4", "Queued")
    decoding = cat.lease_job("worker-b/7", 30.0)  # its lease long run out when a test reads it
    with cat.holding("worker-b/7"):
        cat.update_job(decoding.id, "decoding", progress=0.25, stage="speech")
    indexing = cat.lease_job("worker-c/2", 30.0, exclude=[decoding.id])
    with cat.holding("worker-c/2"):
        cat.update_job(indexing.id, "indexing", progress=0.8, frames_indexed=10, stage="saving")
    assert cat.requeue(budget, "indexed again: a new model", if_status="ready")


def answers(cat: Any) -> dict[str, Any]:
    """What a catalog answers about what ``fill`` stored, through its public methods, as
    JSON; scores rounded (BM25 is computed again on each read)."""
    videos = cat.list_videos()
    ids = [v.id for v in videos]
    jobs = cat.jobs_in(("queued", "decoding", "indexing", "ready", "failed"))
    keys = [(t.video_id, t.kind, t.n) for i in ids for t in cat.texts(i)]
    return _plain(
        {
            "videos": videos,
            "jobs": jobs,
            "job_by_id": [cat.get_job(j.id) for j in jobs],
            "latest_jobs": sorted(cat.latest_jobs(ids).items()),
            "counts": sorted(cat.counts().items()),
            "find_ready": [cat.find_ready(v.sha256) for v in videos if v.sha256],
            "texts": {str(i): cat.texts(i) for i in ids},
            "speech": {str(i): cat.texts(i, "speech") for i in ids},
            "ready_ids": [sorted(cat.ready_ids(metadata=f)) for f in FILTERS],
            "search": {q: cat.keyword_search(q) for q in QUERIES},
            "search_screen": {q: cat.keyword_search(q, kinds=["screen"]) for q in QUERIES},
            "texts_at": {q: sorted(cat.texts_at(keys, query=q).items()) for q in QUERIES},
        }
    )


# Fields added since the fixture's release: left out where they hold what an old row reads
# as (None; a video's collection "default"), so an old catalog's answers are compared as that
# release gave them.
_ADDED_FIELDS = {
    "language": None,
    "english": None,
    "snippet_english": None,
    "collection": "default",
}


def _plain(x: Any) -> Any:
    if dataclasses.is_dataclass(x):
        x = dataclasses.asdict(x)
        x = {k: v for k, v in x.items() if not (k in _ADDED_FIELDS and v == _ADDED_FIELDS[k])}
    if isinstance(x, dict):
        return {
            k: round(v, 9) if k in ("score", "coverage") and v else _plain(v) for k, v in x.items()
        }
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def main() -> None:
    from tests._postgres import CatalogPlace, PostgresServer, binaries

    FIXTURES.mkdir(exist_ok=True)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        lite = CatalogPlace("sqlite", Path(tmp))
        fill(lite.open())
        out["sqlite"] = answers(lite.open(read_only=True))
        lite.close()  # the last connection checkpoints the WAL into the file and removes it
        shutil.copyfile(lite.path, FIXTURES / "catalog.db")

    bin_dir = binaries()
    server = PostgresServer(bin_dir)
    try:
        place = CatalogPlace("postgres", server.root, server.url)
        fill(place.open())
        out["postgres"] = answers(place.open(read_only=True))
        dump = subprocess.run(
            [str(bin_dir / "pg_dump"), "--no-owner", "--no-privileges", "-d", place.url],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        (FIXTURES / "catalog.sql").write_text(dump)
        place.close()
    finally:
        server.stop()
    (FIXTURES / "answers.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
