"""A small OpenCLIP model at random weights, saved as a user's would be: a model config and a
weights file at local paths (``cfg.visual_model = open_clip:<config .json>:<weights>``)."""

from __future__ import annotations

import json
from pathlib import Path

EMBED_DIM = 256  # the joint space of the tiny model (the default's visual space is 1280-d)


def tiny_clip(folder: Path, seed: int = 0) -> str:
    """Write ``tiny-clip.json`` (a 2-layer ViT image tower and a 2-layer text transformer)
    and its random weights into ``folder``; return the ``visual_model`` value naming them."""
    import open_clip
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "tiny-clip.json"
    config.write_text(
        json.dumps(
            {
                "embed_dim": EMBED_DIM,
                "vision_cfg": {"image_size": 64, "layers": 2, "width": 64, "patch_size": 16},
                "text_cfg": {
                    "context_length": 77,
                    "vocab_size": 49408,
                    "width": 64,
                    "heads": 2,
                    "layers": 2,
                },
            }
        )
    )
    open_clip.add_model_config(config)
    torch.manual_seed(seed)
    model = open_clip.create_model("tiny-clip", pretrained=None)
    weights = folder / "tiny-clip.pt"
    torch.save(model.state_dict(), weights)
    return f"open_clip:{config}:{weights}"
