"""The layout of a fused feature row, shared by the codecs and their tables: two L2-normalised
spaces side by side (visual first), and checks on a matrix of such rows."""

from __future__ import annotations

import numpy as np

from vifusion.types import SEMANTIC_DIM, VISUAL_DIM

_D = VISUAL_DIM + SEMANTIC_DIM
_SPACE_DIMS = (VISUAL_DIM, SEMANTIC_DIM)
_SPACE_LO = (0, VISUAL_DIM)  # first column of each space in a fused row
_PQ_BITS = 8
_PQ_KSUB = 1 << _PQ_BITS

_FULL = tuple((lo, lo + d) for lo, d in zip(_SPACE_LO, _SPACE_DIMS))


def _rows(x: np.ndarray) -> np.ndarray:
    """``x`` as a C-contiguous float32 (n, D) matrix (no copy when it already is one)."""
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[1] != _D:
        raise ValueError(f"expected an (n, {_D}) feature matrix, got shape {x.shape}")
    return np.ascontiguousarray(x, dtype=np.float32)


def _space_absmax(x: np.ndarray, bounds: tuple[tuple[int, int], ...]) -> np.ndarray:
    """(n, len(bounds)) max |x| per row over each column range; ValueError on NaN/inf."""
    amax = np.zeros((len(x), len(bounds)), np.float32)
    if len(x):
        for i, (lo, hi) in enumerate(bounds):
            if hi > lo:
                amax[:, i] = np.abs(x[:, lo:hi]).max(axis=1)
    if not np.isfinite(amax).all():  # NaN propagates through max: one check covers both
        raise ValueError("features hold NaN or inf")
    return amax
