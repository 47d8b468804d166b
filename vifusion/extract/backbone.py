"""The visual model behind one small interface: the offline default or a user's OpenCLIP model.

``load_backbone(cfg)`` gives what ``cfg.visual_model`` names (``index/model.py`` parses it):

- ``default``: ``model.Embedder``, EfficientNet-Lite0 features (visual) and ConSE (semantic,
  the text model's space): a text query searches the ``semantic`` space.
- ``open_clip:<architecture>:<weights>``: ``ClipBackbone``, an OpenCLIP / SigLIP model whose
  weights the user keeps at a local path (nothing is fetched from a model hub). Its image
  tower embeds frames, images and clips, its text tower text queries, into one joint space,
  which is what the ``visual`` space then holds: a text query searches ``visual``.

Either way ``embed_text`` is all-MiniLM-L6-v2, for the speech and screen-text rows and the
queries of those spaces, so a change of visual model leaves them as they are.

Rows keep their width (``types.VISUAL_DIM + SEMANTIC_DIM``: the hand-over, the codecs and the
log are laid out for it): a model's vectors of fewer dimensions are zero-padded into the
visual columns, which keeps every inner product as it was. A joint model has one vector a
frame, so its semantic columns hold one fixed unit vector: dedup, which folds frames alike in
both spaces, then judges them by the image vector alone. Quality with real CLIP weights was
not measured here (only the architecture, at random weights, is tested).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F

from vifusion.config import Config
from vifusion.datadir import models_dir
from vifusion.extract.text import TextEncoder
from vifusion.index.model import ModelRecord, model_record, parse_visual_model
from vifusion.types import SEMANTIC_DIM, VISUAL_DIM


class Backbone(Protocol):
    """What the extractor, the searcher and the calibration need of a visual model."""

    record: ModelRecord  # the model's name and weights' fingerprint, as the shards record it
    device: torch.device
    text_space: str  # the frame space a text query searches: "semantic" or "visual"

    def embed_frames(
        self, frames: np.ndarray, terms: Sequence[tuple[list[str], list[float]]] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """uint8 (b, H, W, 3) RGB frames -> (visual (b, VISUAL_DIM), semantic (b, SEMANTIC_DIM));
        ``terms``: each frame's extra concept words (``people.py``), where the model takes them."""
        ...

    def embed_images(self, images: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Images of any sizes -> as ``embed_frames``."""
        ...

    def embed_text(self, texts: Sequence[str]) -> np.ndarray:
        """Texts -> all-MiniLM-L6-v2 vectors (n, SEMANTIC_DIM): text rows and their queries."""
        ...

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """Text queries -> vectors of ``text_space``, to search frames by what they show."""
        ...


def load_backbone(cfg: Config, device: torch.device | None = None) -> Backbone:
    """The model ``cfg.visual_model`` names, on ``device`` (default: a GPU where this process has
    one). The default leaves its caches in the model cache (``datadir.models_dir``)."""
    from vifusion.extract.model import Embedder, pick_device

    device = device or pick_device()
    with contextlib.redirect_stdout(io.StringIO()):  # the weights loaders print
        if parse_visual_model(cfg.visual_model) is None:
            return Embedder(cfg.conse_top_k, device, models_dir(cfg), cfg.concept_hypernyms)
        return ClipBackbone(cfg.visual_model, device)


class ClipBackbone:
    """An OpenCLIP / SigLIP model from local weights. Not thread-safe; one per actor."""

    text_space = "visual"

    def __init__(self, spec: str, device: torch.device) -> None:
        import open_clip

        arch, weights = parse_visual_model(spec)
        self.record = model_record(spec)
        self.device = device
        if arch.endswith(".json"):  # a model config of the user's own
            open_clip.add_model_config(arch)
            arch = Path(arch).stem
        # a local file as ``pretrained``: loaded strictly, with nothing fetched
        model = open_clip.create_model(arch, pretrained=str(weights), device=device)
        self.model = model.eval()
        self.tokenizer = open_clip.get_tokenizer(arch)
        pre = open_clip.get_model_preprocess_cfg(model)
        size = pre["size"]
        self.size = (size, size) if isinstance(size, int) else tuple(size)
        self.mean = torch.tensor(pre["mean"], device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(pre["std"], device=device).view(1, 3, 1, 1)
        self.dims = int(self.model.encode_text(self.tokenizer(["x"]).to(device)).shape[-1])
        if self.dims > VISUAL_DIM:
            raise ValueError(
                f"{self.record.name} embeds into {self.dims} dimensions; the index's rows "
                f"hold at most {VISUAL_DIM}"
            )
        self._text: TextEncoder | None = None
        # the fixed semantic columns of every frame (see the module's docstring)
        self._one = np.zeros(SEMANTIC_DIM, np.float32)
        self._one[0] = 1.0

    def _preprocess(self, frames: np.ndarray) -> torch.Tensor:
        """uint8 (b, H, W, 3) RGB -> the model's input: short side resized to the model's,
        centre crop, its mean and std (as OpenCLIP's own transform, on tensors)."""
        x = torch.from_numpy(np.ascontiguousarray(frames)).to(self.device)
        x = x.permute(0, 3, 1, 2).float() / 255.0
        h, w = x.shape[2:]
        th, tw = self.size
        scale = max(th / h, tw / w)
        size = (max(th, round(h * scale)), max(tw, round(w * scale)))
        if size != (h, w):
            x = F.interpolate(x, size=size, mode="bicubic", antialias=True, align_corners=False)
        top, left = (size[0] - th) // 2, (size[1] - tw) // 2
        x = x[:, :, top : top + th, left : left + tw].clamp(0, 1)
        return (x - self.mean) / self.std

    @torch.inference_mode()
    def embed_frames(self, frames: np.ndarray, terms=None) -> tuple[np.ndarray, np.ndarray]:
        """``terms`` are ignored: the image tower sees people itself."""
        image = self.model.encode_image(self._preprocess(frames), normalize=True)
        visual = _pad(image.float().cpu().numpy(), VISUAL_DIM)
        return visual, np.tile(self._one, (len(visual), 1))

    def embed_images(self, images: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        pairs = [self.embed_frames(img[None]) for img in images]
        return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])

    @torch.inference_mode()
    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        tokens = self.tokenizer(list(texts)).to(self.device)
        text = self.model.encode_text(tokens, normalize=True)
        return _pad(text.float().cpu().numpy(), VISUAL_DIM)

    def embed_text(self, texts: Sequence[str]) -> np.ndarray:
        if self._text is None:  # loaded at first use, as the default's
            self._text = TextEncoder(self.device)
        return self._text.encode(texts)


def _pad(vectors: np.ndarray, width: int) -> np.ndarray:
    """(n, d) -> (n, width), zeros after: norms and inner products unchanged."""
    out = np.zeros((len(vectors), width), np.float32)
    out[:, : vectors.shape[1]] = vectors
    return out
