"""A reindex while the service runs (vifusion/ingest/live_reindex.py): the library embedded
again with another visual model (a random-weight OpenCLIP model of the real architecture)
while searches answer and videos come and go, then the switch; a restart keeps the new model."""

from __future__ import annotations

import time

import av
import numpy as np
import pytest
import ray

from tests._helpers import final_status
from tests.extract._clip import tiny_clip
from vifusion.config import Config
from vifusion.index.layout import index_dir, shard_dir
from vifusion.index.model import recorded
from vifusion.ingest.live_reindex import ReindexBusy
from vifusion.service import Service


def _still(path, at_s: float = 1.0) -> np.ndarray:
    with av.open(str(path)) as container:
        frame = next(f for f in container.decode(video=0) if f.time >= at_s)
        return frame.to_ndarray(format="rgb24")


def _held(svc: Service) -> set[int]:
    """The videos the shard set in use holds."""
    return {v for h in svc.shards.handles for v in ray.get(h.video_ids.remote())}


@pytest.mark.slow
def test_a_reindex_while_serving_switches_models_and_loses_no_video(indexed_copy, tmp_path):
    data, videos = indexed_copy
    spec = tiny_clip(tmp_path / "clip")
    # configured with the new model, the index holding the default's vectors: it serves with
    # the index's model until a reindex
    with Service(Config(data_dir=data, visual_model=spec)) as svc:
        state = svc.reindex_state()
        assert (state["state"], state["index_model"], state["configured_model"]) == (
            "idle",
            "default",
            spec,
        )
        still = _still(videos["kitchen.mp4"].path)
        kitchen = svc.search(image=still, top_k=1).results
        assert kitchen
        ready = svc.catalog.ready_ids()
        gone = next(v for v in ready if v != kitchen[0].video_id)

        svc.reindex()
        with pytest.raises(ReindexBusy):
            svc.reindex()
        with open(videos["street.mp4"].path, "rb") as f:
            added = svc.ingest_upload(f, "street-again.mp4")
        svc.delete(gone)
        answered = 0
        while (state := svc.reindex_state())["state"] in ("embedding", "switching"):
            # never an error, never empty: from the old set, then from the new
            assert svc.search(image=still, top_k=3).results
            answered += 1
            time.sleep(0.2)
        assert state["state"] == "ready", state["error"]
        assert answered > 0
        assert final_status(svc.catalog, added.job_id) == "ready"

        # switched: the new model's set, every ready video in it and only those
        assert svc.reindex_state()["index_model"] == spec
        assert index_dir(data).name == "gen-1" and not list((data / "index").glob("shard-*"))
        assert recorded(shard_dir(data, 0)).name == "open_clip:tiny-clip"
        assert _held(svc) == set(svc.catalog.ready_ids())
        assert gone not in _held(svc) and added.video_id in _held(svc)
        # searched with the new model's image tower: a still of a video finds that video
        found = svc.search(image=still, top_k=1).results
        assert found and found[0].video_id == kitchen[0].video_id

    # started again with the default configured: the index's model still answers
    with Service(Config(data_dir=data)) as svc:
        assert svc.reindex_state()["index_model"] == spec
        found = svc.search(image=still, top_k=1).results
        assert found and found[0].video_id == kitchen[0].video_id


@pytest.mark.slow
def test_two_api_replicas_sharing_the_actors_both_move_to_the_reindexed_set(indexed_copy, tmp_path):
    """A cluster's way (``shared_actors``): the detached pool switches, and each API replica
    moves on its next request; the old set's actors are gone after it."""
    from vifusion.cluster.actors import actor_name, find_actor

    data, videos = indexed_copy
    cfg = Config(data_dir=data, visual_model=tiny_clip(tmp_path / "clip"), shared_actors=True)
    first, second = Service(cfg), None
    try:
        second = Service(cfg)
        still = _still(videos["kitchen.mp4"].path)
        kitchen = first.search(image=still, top_k=1).results[0].video_id
        first.reindex()
        while (state := second.reindex_state())["state"] in ("embedding", "switching"):
            for svc in (first, second):
                assert svc.search(image=still, top_k=1).results
            time.sleep(0.2)
        assert state["state"] == "ready", state["error"]
        for svc in (first, second):
            found = svc.search(image=still, top_k=1).results
            assert found and found[0].video_id == kitchen
            assert svc.reindex_state()["index_model"] == cfg.visual_model
        assert find_actor(actor_name(cfg, "shard", 0, 0)) is None  # the old set's
        assert find_actor(actor_name(cfg, "shard", "gen-1", 0, 0)) is not None
    finally:
        if second is not None:
            second.close()
        first.shutdown()
