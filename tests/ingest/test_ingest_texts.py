"""Speech and on-screen text through the real ingest path: the service's job queue, the
extractor actor (tiny.en, RapidOCR, all-MiniLM-L6-v2), the aggregator and the shards, the
catalog. Talk videos with espeak-ng speech and rendered slides (``vifusion.samples.talks``)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import ray

from tests._helpers import final_status, needs_espeak, words
from tests.media import audio_only
from vifusion.config import Config
from vifusion.samples import talks as _talks
from vifusion.types import FusedBatch

HARBOUR = "Please meet me at the old harbour tomorrow morning."
MEETING = "The quarterly meeting starts at nine."
REVENUE = "Quarterly revenue grew 42 percent"
ZORBLAX = "Zorblax launch in March"
ALL_TIME = (0.0, 1e9)


@pytest.fixture(scope="module")
def service(ray_session, tmp_path_factory):
    from vifusion.service import Service

    root = tmp_path_factory.mktemp("ingest-texts")
    cfg = Config(data_dir=root / "data", ingest_roots=(root / "videos",))
    with Service(cfg) as service:
        yield service


@pytest.fixture(scope="module")
def videos(service) -> Path:
    return service.cfg.ingest_roots[0]


def _index(service, talk: Path) -> tuple[int, str]:
    done = service.ingest_uri(talk.as_uri())
    assert final_status(service.catalog, done.job_id) == "ready", service.job(done.job_id).error
    return done.video_id, done.job_id


def _stored(service, video_id: int, kind: str) -> tuple[list[tuple[float, float, str]], np.ndarray]:
    """A video's rows of ``kind``: the catalog's (start_s, end_s, text), and the times the shard holds."""
    rows = [(r.start_s, r.end_s, r.text) for r in service.catalog.texts(video_id, kind)]
    times, vectors = service.shards.frames(kind, video_id, *ALL_TIME)
    assert len(times) == len(vectors) == len(rows)
    return rows, times


@needs_espeak
@pytest.mark.parametrize("suffix", [".mp4", ".webm"])  # H.264 + AAC; VP8 + Opus
def test_a_talks_speech_and_slides_reach_the_catalog_and_the_shard(
    service, videos: Path, suffix: str
) -> None:
    talk = _talks.write_talk(
        videos / f"talk{suffix}",
        8.0,
        said=[(1.0, HARBOUR)],
        shown=[(0.0, 3.0, [ZORBLAX]), (3.0, 8.0, [REVENUE])],
    )
    video_id, job_id = _index(service, talk.path)
    job = service.job(job_id)
    assert (job.stage, job.warnings) == (None, ())

    speech, times = _stored(service, video_id, "speech")
    heard = " ".join(text for _, _, text in speech)
    assert {"old", "tomorrow", "morning"} <= words(heard), heard
    said = talk.said[0]
    # Whisper's times are coarse: each segment lies within a second of where it was said.
    assert all(said.start_s - 1.0 <= t0 <= t1 <= said.end_s + 1.0 for t0, t1, _ in speech), (
        speech,
        said,
    )
    assert np.allclose(
        times, [[t0, t1] for t0, t1, _ in speech], atol=1e-3
    )  # row n is vector n (float32 times)

    screen, times = _stored(service, video_id, "screen")
    assert [(t0, t1, text) for t0, t1, text in screen] == [(0.0, 3.0, ZORBLAX), (3.0, 8.0, REVENUE)]
    assert times.tolist() == [[0.0, 3.0], [3.0, 8.0]]
    # The vectors are the sentence model's: a query with the slide's words finds its span first.
    hits = service.shards.search(
        "screen", service.searcher.embedder.embed_text(["revenue grew"]), 2, [video_id]
    )[0]
    assert (hits[0].t_start, hits[0].t_end) == (3.0, 8.0)


@pytest.mark.parametrize(
    "audio, warning",
    [
        ("none", "no audio track"),
        ("silence", "audio track is silent"),
        ("music", "no speech heard in"),
        ("broken", "broken audio stream ("),
    ],
)
def test_bad_audio_indexes_the_frames_with_a_warning(
    service, videos: Path, audio: str, warning: str
) -> None:
    talk = _talks.write_talk(
        videos / f"{audio}.mkv", 3.0, audio=audio, shown=[(0.0, 3.0, [REVENUE])]
    )
    video_id, job_id = _index(service, talk.path)
    job = service.job(job_id)
    assert job.status == "ready" and job.frames_indexed == 3 and job.error is None
    assert len(job.warnings) == 1 and job.warnings[0].startswith(f"{audio}.mkv: {warning}"), (
        job.warnings
    )
    assert _stored(service, video_id, "speech")[0] == []
    assert _stored(service, video_id, "screen")[0] == [(0.0, 3.0, REVENUE)]


def test_an_audio_only_file_is_refused_at_probe_with_its_reason(service, videos: Path) -> None:
    path = videos / "voice.m4a"
    path.parent.mkdir(parents=True, exist_ok=True)
    audio_only(path, 2.0)
    done = service.ingest_uri(path.as_uri())
    assert final_status(service.catalog, done.job_id) == "failed"
    job = service.job(done.job_id)
    assert job.error == "voice.m4a: not a video (no video stream)"
    assert job.stage == "probing"  # where it failed
    assert service.catalog.texts(done.video_id) == []


@needs_espeak
def test_indexing_again_writes_the_same_rows_and_nothing_of_the_last_run_stays(
    service, videos: Path
) -> None:
    talk = _talks.write_talk(
        videos / "again.mkv", 6.0, said=[(0.5, MEETING)], shown=[(0.0, 6.0, [ZORBLAX])]
    )
    video_id, _ = _index(service, talk.path)
    first = {kind: _stored(service, video_id, kind) for kind in ("speech", "screen")}
    assert first["speech"][0] and first["screen"][0]
    vectors = service.health()["vectors"]
    # What an earlier run with more rows left: a third speech row, in the catalog and the shard.
    stale = first["speech"][0] + [(5.0, 6.0, "words of an earlier run")]
    service.catalog.put_texts(video_id, "speech", stale)
    extra = FusedBatch.of_texts(
        video_id,
        "speech",
        len(stale) - 1,
        [[5.0, 6.0]],
        service.searcher.embedder.embed_text(["words of an earlier run"]),
    )
    ray.get(service.shards.handle_for(video_id).add.remote(extra))

    job_id = service.catalog.requeue(video_id, "re-indexing: a test")
    service.jobs.wake()
    assert final_status(service.catalog, job_id) == "ready"
    for kind in ("speech", "screen"):
        rows, times = _stored(service, video_id, kind)
        assert rows == first[kind][0] and times.tolist() == first[kind][1].tolist()
    assert service.health()["vectors"] == vectors


def test_deleting_a_video_removes_its_texts_and_rows(service, videos: Path) -> None:
    talk = _talks.write_talk(videos / "gone.mp4", 3.0, audio="none", shown=[(0.0, 3.0, [ZORBLAX])])
    video_id, _ = _index(service, talk.path)
    assert _stored(service, video_id, "screen")[0]
    service.delete(video_id)
    assert service.catalog.texts(video_id) == []
    for space in ("visual", "speech", "screen"):
        assert len(service.shards.frames(space, video_id, *ALL_TIME)[0]) == 0


def test_a_video_deleted_while_its_job_runs_leaves_no_texts(service, videos: Path) -> None:
    talk = _talks.write_talk(
        videos / "short-lived.mp4",
        12.0,
        audio="none",
        shown=[(0.0, 6.0, [ZORBLAX]), (6.0, 12.0, [REVENUE])],
    )
    doomed = service.ingest_uri(talk.path.as_uri())
    deadline = time.monotonic() + 300
    while service.job(doomed.job_id).stage not in ("frames", "speech", "saving"):  # under way
        assert time.monotonic() < deadline and service.job(doomed.job_id).status != "failed"
        if service.job(doomed.job_id).status == "ready":
            break  # too quick to catch: deleting it now must leave nothing all the same
        time.sleep(0.05)
    service.delete(doomed.video_id)
    after = _talks.write_talk(videos / "after.mp4", 2.0, audio="none")
    _index(service, after.path)  # one extractor: the deleted video's job has ended by now
    assert service.catalog.texts(doomed.video_id) == []
    assert len(service.shards.frames("screen", doomed.video_id, *ALL_TIME)[0]) == 0
