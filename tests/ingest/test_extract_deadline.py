"""An extractor call has a deadline scaled by the video's duration: one that hangs (here: its
process stopped with SIGSTOP right after it probed the video) fails its job with the reason,
the extractor is killed and restarted, and the next video indexes on it as usual."""

from __future__ import annotations

import os
import signal
from fractions import Fraction

import av
import numpy as np
import pytest
import ray

from tests.media import tiny_frames
from vifusion.config import Config
from vifusion.index import shard_for
from vifusion.ingest.indexer import Progress
from vifusion.runtime import Runtime


def long_and_cheap(path) -> None:
    """An hour of video in 72 frames (one every 50 s): a long deadline for little work."""
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=Fraction(1, 50))
        s.width = s.height = 64
        s.pix_fmt, s.options = "yuv420p", {"preset": "ultrafast"}
        for i in range(72):
            frame = av.VideoFrame.from_ndarray(
                np.full((64, 64, 3), i * 3, np.uint8), format="rgb24"
            )
            frame.pts = i
            for packet in s.encode(frame):
                c.mux(packet)
        for packet in s.encode(None):
            c.mux(packet)


def _pid(actor) -> int:
    return ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))


@pytest.mark.slow
def test_an_extractor_past_its_deadline_fails_the_job_and_is_restarted(ray_session, tmp_path):
    hung, after = tmp_path / "hung.mp4", tmp_path / "after.mp4"
    tiny_frames(hung, 120, 10)  # 12 s: 2 s + 0.05 s x 12 s = 2.6 s to index it
    long_and_cheap(after)  # 3600 s: 182 s to index 8 frames
    cfg = Config(
        data_dir=tmp_path / "data",
        max_frames=8,
        embed_batch=1,
        dedup_cosine=1.01,
        extract_deadline_base_s=2.0,
        extract_deadline_per_video_s=0.05,
    )
    with Runtime(cfg, writer=True) as rt:
        (extractor,) = rt.indexer.extractors
        pid = _pid(extractor)
        stopped = []

        def stop_once_probed(ev) -> None:
            if isinstance(ev, Progress) and not stopped:
                os.kill(pid, signal.SIGSTOP)  # hangs as a stuck decoder would
                stopped.append(ev)

        (failed,) = rt.indexer.index_files([hung], stop_once_probed)
        assert stopped and stopped[0].frames_done == 0
        assert failed.status == "failed"
        assert "hung.mp4: extraction took longer than 2.6 s" in failed.error, failed.error
        assert rt.catalog.get_job(failed.job_id).error == failed.error
        shard = rt.shards.handles[shard_for(failed.video_id, cfg.num_shards)]
        times, _ = ray.get(shard.frames.remote("visual", failed.video_id, 0, 1e9))
        assert len(times) == 0  # nothing of it stays in the shard

        (ready,) = rt.indexer.index_files([after])
        assert ready.status == "ready" and ready.frames == 8, ready.error
        assert _pid(extractor) != pid  # the same handle, a new process
