"""`/v1/reindex` on the live service, without starting one (tests/ingest/test_live_reindex.py
runs a whole reindex): its state and models, and what it refuses."""

from __future__ import annotations

import pytest

from vifusion.client import ApiError, Client

from .test_keys import make_key


def test_live_the_reindex_state_names_the_models_in_use_and_configured(live):
    state = live.vf.reindex_state()
    assert state["state"] == "idle" and state["error"] is None
    assert state["index_model"] == state["configured_model"] == "default"


def test_live_a_reindex_to_a_model_the_service_is_not_configured_with_is_refused(live):
    with pytest.raises(ApiError) as refused:
        live.vf.reindex("open_clip:ViT-B-32:/etc/passwd")
    assert refused.value.status == 409 and refused.value.code == "model_not_configured"
    assert "VIFUSION_VISUAL_MODEL" in str(refused.value)
    assert live.vf.reindex_state()["state"] == "idle"  # nothing started


def test_live_a_key_limited_to_collections_cannot_reindex(live):
    key = make_key(live, "admin", name="one collection", collections=["demo"])["key"]
    with Client(live.url, key) as limited:
        for call in (limited.reindex_state, limited.reindex):
            with pytest.raises(ApiError) as refused:
                call()
            assert refused.value.status == 403 and refused.value.code == "forbidden_collection"
