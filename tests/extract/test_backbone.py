"""The visual model behind one interface (``extract/backbone.py``): a user's OpenCLIP model from
local files, here the real architecture at random weights (quality with real weights is not
measured here), and the index's record of which model made its vectors (``index/model.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.extract._clip import EMBED_DIM, tiny_clip
from vifusion.config import Config
from vifusion.index.model import ModelMismatch, recorded
from vifusion.index.shard import Shard
from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FusedBatch


@pytest.fixture(scope="module")
def clip_spec(tmp_path_factory) -> str:
    return tiny_clip(tmp_path_factory.mktemp("clip"))


@pytest.fixture(scope="module")
def clip(clip_spec, tmp_path_factory):
    import torch

    from vifusion.extract.backbone import load_backbone

    cfg = Config(data_dir=tmp_path_factory.mktemp("data"), visual_model=clip_spec)
    return load_backbone(cfg, torch.device("cpu"))


def _frames(n: int = 3) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (n, 224, 298, 3), dtype=np.uint8)


def test_a_clip_model_embeds_frames_and_text_queries_into_one_space(clip):
    visual, semantic = clip.embed_frames(_frames())
    assert visual.shape == (3, VISUAL_DIM) and semantic.shape == (3, SEMANTIC_DIM)
    # its own dimensions, zero-padded into the row: inner products unchanged
    assert np.allclose(np.linalg.norm(visual[:, :EMBED_DIM], axis=1), 1, atol=1e-5)
    assert not visual[:, EMBED_DIM:].any()
    query = clip.embed_query(["a dog on a beach"])
    assert clip.text_space == "visual" and query.shape == (1, VISUAL_DIM)
    assert not query[:, EMBED_DIM:].any()
    # speech and screen rows keep the text model, whatever the visual model
    assert clip.embed_text(["hello"]).shape == (1, SEMANTIC_DIM)


def test_frames_are_embedded_as_open_clips_own_transform_would(clip):
    import torch
    from open_clip import image_transform
    from PIL import Image

    frames = _frames(2)
    mine, _ = clip.embed_frames(frames)
    size = clip.size[0]
    transform = image_transform(
        size, is_train=False, mean=clip.mean.flatten().tolist(), std=clip.std.flatten().tolist()
    )
    with torch.inference_mode():
        x = torch.stack([transform(Image.fromarray(f)) for f in frames])
        theirs = clip.model.encode_image(x, normalize=True).numpy()
    cos = (mine[:, :EMBED_DIM] * theirs).sum(axis=1)
    assert (cos > 0.99).all(), cos


def test_a_shard_refuses_vectors_of_another_model_naming_both(clip_spec, tmp_path):
    default = Config(data_dir=tmp_path)
    shard = Shard(0, tmp_path / "shard-0", default)
    rng = np.random.default_rng(1)
    visual, semantic = rng.normal(size=(2, VISUAL_DIM)), rng.normal(size=(2, SEMANTIC_DIM))
    shard.add(FusedBatch.of_video(7, 0, [(0, 1), (1, 2)], visual, semantic))
    assert recorded(tmp_path / "shard-0").name == "efficientnet-lite0+conse"
    other = Config(data_dir=tmp_path, visual_model=clip_spec)
    for writer in (True, False):
        with pytest.raises(ModelMismatch) as refused:
            Shard(0, tmp_path / "shard-0", other, writer=writer)
        assert "efficientnet-lite0+conse" in str(refused.value)
        assert "open_clip:tiny-clip" in str(refused.value)
    assert len(Shard(0, tmp_path / "shard-0", default).video_ids()) == 1


def test_a_shard_from_before_records_is_the_default_models(clip_spec, tmp_path):
    default = Config(data_dir=tmp_path)
    shard = Shard(0, tmp_path / "shard-0", default)
    shard.add(
        FusedBatch.of_video(7, 0, [(0, 1)], np.ones((1, VISUAL_DIM)), np.ones((1, SEMANTIC_DIM)))
    )
    (tmp_path / "shard-0" / "model.json").unlink()  # as every release before wrote it
    with pytest.raises(ModelMismatch, match="efficientnet-lite0"):
        Shard(0, tmp_path / "shard-0", Config(data_dir=tmp_path, visual_model=clip_spec))
    # an empty shard takes whichever model first writes it
    fresh = Shard(1, tmp_path / "shard-1", Config(data_dir=tmp_path, visual_model=clip_spec))
    assert recorded(fresh.directory).name == "open_clip:tiny-clip"
