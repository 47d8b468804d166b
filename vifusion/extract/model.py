"""The embedding model: frames -> (visual, semantic) vectors; text -> semantic vectors.

- visual (1280-d): EfficientNet-Lite0 pooled features, for image and clip queries.
- semantic (384-d): ConSE. A frame's top-k ImageNet class probabilities weight the
  all-MiniLM-L6-v2 embeddings of those classes' names, which puts the frame in the same
  space as text queries. No CLIP model can be had offline; this needs only the two wheels.
  The classes' WordNet hypernyms join in at a quarter weight (``_concepts``), so "a dog"
  finds a Samoyed; a change of ``hypernym_weight`` or of the table changes the vectors (a
  data dir indexed before needs a re-index to match: docs/benchmarks.md, "Real footage").
Both L2-normalised, so inner product = cosine.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from vifusion.extract import _concepts, _seen_query, _text_onnx
from vifusion.extract._seen_query import CLASS_PROMPT, imagenet_class_names
from vifusion.extract.text import TextEncoder
from vifusion.extract.vision import features_and_probs, load_efficientnet_lite0, preprocess
from vifusion.index.model import DEFAULT, model_record

__all__ = ["CLASS_PROMPT", "Embedder", "imagenet_class_names", "pick_device"]
log = logging.getLogger(__name__)


def pick_device(prefer_gpu: bool = True) -> torch.device:
    """CUDA where this process was given a GPU, else CPU (decided at run time, per actor)."""
    return torch.device("cuda" if prefer_gpu and torch.cuda.is_available() else "cpu")


class Embedder:
    """Frames and text into ViFusion's two vector spaces. Not thread-safe; one per actor.
    The default visual model (``backbone.load_backbone``): a text query searches the
    ``semantic`` space, the text model's, so ``embed_query`` is ``embed_text`` taken where
    frames are (``project_query``)."""

    text_space = "semantic"
    record = model_record(DEFAULT)

    def __init__(
        self,
        conse_top_k: int = 10,
        device: torch.device | None = None,
        cache_dir: Path | None = None,
        hypernym_weight: float = _concepts.HYPERNYM_WEIGHT,
    ) -> None:
        self.device = device or pick_device()
        self.conse_top_k = conse_top_k
        self.vision = load_efficientnet_lite0(self.device)
        self._text: TextEncoder | None = None
        self._seen_concepts: np.ndarray | None = None  # project_query's, made at first use
        names = torch.from_numpy(self._class_vectors(cache_dir)).to(self.device)
        self._names = names  # class_prompts' rows: classes, hypernyms, face words
        hypernyms = 1000 + len(_concepts.hypernym_words())
        self.class_vectors, self.hypernym_vectors = names[:1000], names[1000:hypernyms]
        # _terms_vectors' words, embedded: the face words' from the cache, others as met
        self._term_vectors: dict[str, torch.Tensor] = dict(
            zip(_seen_query.FACE_WORDS, names[hypernyms:])
        )
        self.hypernym_of = torch.from_numpy(_concepts.membership()).to(self.device)
        self.hypernym_weight = hypernym_weight
        # which concepts built the semantic vectors: vectors of two differ, and do not mix
        self.concept_table = (
            f"hypernyms-{_concepts.table_id()}@{hypernym_weight:g}"
            if hypernym_weight
            else "classes"
        )
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
        """Text embeddings of the 1000 class names, then of the hypernym words
        (``_concepts.hypernym_words``); cached because they cost seconds on a CPU."""
        prompts = _seen_query.class_prompts()
        path = _seen_query.class_text_path(cache_dir, prompts) if cache_dir else None
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
    def embed_frames(
        self, frames: np.ndarray, terms: Sequence[tuple[list[str], list[float]]] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """uint8 (b, H, W, 3) RGB frames of one size -> (visual (b, 1280), semantic (b, 384)).
        ``terms``: each frame's extra concept words and weights (``people.py``), mixed into
        its semantic vector beside its classes."""
        x = preprocess(frames, self.device)
        pooled, probs = features_and_probs(self.vision, x)
        semantic = self.concepts(probs)
        if terms is not None:
            semantic = semantic + self._terms_vectors(terms)
        return (
            F.normalize(pooled, dim=-1).float().cpu().numpy(),
            F.normalize(semantic, dim=-1).float().cpu().numpy(),
        )

    def _terms_vectors(self, terms: Sequence[tuple[list[str], list[float]]]) -> torch.Tensor:
        """(b, 384): each frame's concept words' text vectors (``CLASS_PROMPT``, as the
        classes'), weighted and summed; the face words come with the class vectors, any other
        word is embedded once per actor."""
        out = torch.zeros((len(terms), self.class_vectors.shape[1]), device=self.device)
        for i, (words, weights) in enumerate(terms):
            for word, weight in zip(words, weights):
                if word not in self._term_vectors:
                    vector = self.text.encode([CLASS_PROMPT.format(word)])[0]
                    self._term_vectors[word] = torch.from_numpy(vector).to(self.device)
                out[i] += weight * self._term_vectors[word]
        return out

    def concepts(self, probs: torch.Tensor) -> torch.Tensor:
        """(b, 1000) class probabilities -> (b, 384) ConSE vectors, not normalised: the
        ``conse_top_k`` likeliest classes' name vectors weighted by their probabilities,
        plus their hypernyms' at ``hypernym_weight``."""
        top = probs.topk(self.conse_top_k, dim=-1)
        semantic = torch.einsum("bk,bkd->bd", top.values, self.class_vectors[top.indices])
        if self.hypernym_weight:
            semantic = semantic + self.hypernym_weight * self._hypernyms(probs)
        return semantic

    def _hypernyms(self, probs: torch.Tensor) -> torch.Tensor:
        """(b, 384): each frame's ``conse_top_k`` likeliest hypernyms' name vectors, each
        weighted by its probability, the sum of its classes' (``_concepts``)."""
        top = (probs.float() @ self.hypernym_of).topk(self.conse_top_k, dim=-1)
        return torch.einsum("bk,bkd->bd", top.values, self.hypernym_vectors[top.indices])

    def embed_images(self, images: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Images of any sizes (each (H, W, 3) uint8 RGB) -> the same as embed_frames."""
        pairs = [self.embed_frames(img[None]) for img in images]
        return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])

    def embed_text(self, texts: Sequence[str]) -> np.ndarray:
        """Query texts -> semantic vectors (n, 384)."""
        return self.text.encode(texts)

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """Text queries -> semantic vectors, to search frames by their concepts."""
        return self.project_query(self.embed_text(texts))

    def project_query(self, vectors: np.ndarray) -> np.ndarray:
        """Query vectors (``embed_text``'s) -> where frames are: the query's nearest concepts
        mixed in as a frame's are (``_seen_query``). A joint model (``backbone.py``) has no
        such method: its text tower embeds into the image space already."""
        if self._seen_concepts is None:
            names = self._names.float().cpu().numpy()
            self._seen_concepts = _seen_query.concept_vectors(names)
        return _seen_query.project(vectors, self._seen_concepts)


def _export_query_model(cache_dir: Path) -> None:
    """Leave the text model's ONNX export in ``cache_dir`` (``_text_onnx``), for text searches
    without torch. Only a speed-up: where it cannot be made, a search embeds with torch."""
    try:
        _text_onnx.export(cache_dir)
    except (OSError, ImportError, RuntimeError) as e:
        log.warning(
            "the query text model was not exported to ONNX (searches load torch instead): %s", e
        )
