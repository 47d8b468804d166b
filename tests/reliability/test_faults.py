"""Faults injected into the real pipeline: Ray actors killed mid-video, on the shared Ray."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import ray

from vifusion.config import Config
from vifusion.index import shard_for
from vifusion.ingest.indexer import Progress
from vifusion.runtime import Runtime
from vifusion.samples import write_video

FPS = 4.0


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    # 12 s at 4 samples a second: 48 frames, several hand-overs, time to kill something
    return write_video(
        tmp_path_factory.mktemp("faults") / "three.mp4", ("coffee", "rocket", "camera")
    )


@pytest.fixture
def runtime(ray_session, tmp_path):
    cfg = Config(data_dir=tmp_path / "data", sample_fps=FPS, dedup_cosine=1.01, embed_batch=8)
    with Runtime(cfg, writer=True) as rt:
        yield rt


def index_killing(rt: Runtime, path, victim) -> tuple[list, list[Progress]]:
    """Index ``path``; kill ``victim()`` (an actor) once the first frames are handed over."""
    seen: list[Progress] = []
    killed = threading.Event()

    def on_progress(ev) -> None:
        if isinstance(ev, Progress):
            seen.append(ev)
            if ev.frames_done > 0 and not killed.is_set():
                killed.set()
                ray.kill(victim(), no_restart=False)

    results = rt.indexer.index_files([path], on_progress)
    assert killed.is_set(), "the video finished before anything was killed"
    return results, seen


def frames_held(rt: Runtime, video_id: int) -> np.ndarray:
    shard = rt.shards.handles[shard_for(video_id, rt.cfg.num_shards)]
    times, _ = ray.get(shard.frames.remote("visual", video_id, 0, 1e9))
    return np.asarray(times)


def assert_all_once(held: np.ndarray, expected: list[list[float]]) -> None:
    """Every row of a clean run there, none twice (times as the shard stores them, float32)."""
    assert held.shape == (len(expected), 2), (held.shape, len(expected))
    assert np.allclose(held, expected, atol=1e-4), held.tolist()


def expected_spans(video) -> list[list[float]]:
    """The rows a clean run indexes: one per sampled frame, from its own time to the next's."""
    from vifusion.extract.decode import decode

    cfg = Config()
    spans = [s for _, batch in decode(video.path, FPS, cfg.max_frames) for s in batch]
    assert len(spans) == round(video.duration_s * FPS)
    return [[t0, t1] for _, t0, t1 in spans]


@pytest.mark.slow
def test_an_extractor_killed_mid_video_is_retried_and_each_frame_indexed_once(runtime, video):
    results, _ = index_killing(runtime, video.path, lambda: runtime.indexer.extractors[0])
    (r,) = results
    assert r.status == "ready", r.error
    assert r.frames == len(expected_spans(video))
    assert_all_once(frames_held(runtime, r.video_id), expected_spans(video))
    assert runtime.catalog.get_video(r.video_id).status == "ready"


@pytest.mark.slow
def test_an_aggregator_killed_with_rows_in_flight_loses_none_and_doubles_none(runtime, video):
    (agg,) = runtime.indexer.aggregators.values()
    results, _ = index_killing(runtime, video.path, lambda: agg)
    (r,) = results
    assert r.status == "ready", r.error
    assert_all_once(frames_held(runtime, r.video_id), expected_spans(video))
