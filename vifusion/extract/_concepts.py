"""ImageNet classes' hypernyms as concepts of a frame: a Samoyed is also a dog, an animal.

``data/hypernyms.json`` (made by ``scripts/wordnet_hypernyms.py`` from WordNet 3.0) gives each
of the 1000 classes its hypernyms as everyday words. A frame's probability of a hypernym is
the sum of its classes' probabilities (ten dog breeds at 0.09 each are a dog at 0.9), and
the ``k`` likeliest hypernyms join its ConSE vector at ``weight`` of their probability: the
generic word a user types ("a dog") then finds the frame, while the class's own name, at full
weight, keeps the specific query ("Samoyed") ranking a Samoyed above a husky.

Measured on the real-footage dev set (benchmarks/realvisual.py, docs/benchmarks.md "Real
footage"): weight 0.25 put the right video first for more everyday-word queries than 0, 0.5,
1 or 2, and than the alternative of mixing the hypernyms into each class's name vector.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path

import numpy as np

TABLE = Path(__file__).parent / "data" / "hypernyms.json"
HYPERNYM_WEIGHT = 0.25  # of a hypernym's summed probability, beside a class's own at 1


@cache
def _table() -> dict:
    return json.loads(TABLE.read_text())


def table_id() -> str:
    """A short hash of the concept table: which hypernyms built a frame's vector."""
    return hashlib.sha256(TABLE.read_bytes()).hexdigest()[:12]


def hypernym_words() -> list[str]:
    """Every hypernym word of the table, sorted: the columns of ``membership``."""
    return sorted({w for _, words in _table()["classes"] for w in words})


def membership() -> np.ndarray:
    """(1000, len(hypernym_words())) float32: 1 where the class (row, ImageNet label) has
    the hypernym (column), so ``probs @ membership()`` is each hypernym's probability."""
    words = {w: i for i, w in enumerate(hypernym_words())}
    out = np.zeros((len(_table()["classes"]), len(words)), np.float32)
    for label, (_, hypernyms) in enumerate(_table()["classes"]):
        out[label, [words[w] for w in hypernyms]] = 1.0
    return out


def hypernyms_of(label: int) -> list[str]:
    """The hypernym words of ImageNet class ``label``, nearest first."""
    return list(_table()["classes"][label][1])
