"""Which spaces a row goes into, and the checks on what a shard is given.

A row's id says its kind (``types.kind_of``): a frame is in ``visual`` and ``semantic``; a
speech segment in ``speech`` and an on-screen text span in ``screen`` (their semantic columns).
"""

from __future__ import annotations

import numpy as np

from vifusion.types import (
    FRAME,
    FRAME_SPACES,
    SCREEN,
    SEMANTIC_DIM,
    SPACES,
    SPEECH,
    VISUAL_DIM,
    FusedBatch,
    kind_of,
)

DIMS: dict[str, int] = {
    "visual": VISUAL_DIM,
    "semantic": SEMANTIC_DIM,
    "speech": SEMANTIC_DIM,
    "screen": SEMANTIC_DIM,
}
# A space's vectors are these columns of its rows (``FusedBatch.space``).
COLUMNS = {"visual": "visual", "semantic": "semantic", "speech": "semantic", "screen": "semantic"}
SPACES_OF_KIND = {FRAME: FRAME_SPACES, SPEECH: ("speech",), SCREEN: ("screen",)}


def check_queries(space: str, queries: np.ndarray, k: int) -> np.ndarray:
    """Validate a search request; return the queries as C-contiguous float32 (nq, d)."""
    if space not in DIMS:
        raise ValueError(f"unknown space {space!r}; expected one of {SPACES}")
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    queries = np.asarray(queries)
    d = DIMS[space]
    if queries.ndim != 2 or queries.shape[1] != d:
        raise ValueError(f"{space} queries must have shape (nq, {d}), got {queries.shape}")
    return np.ascontiguousarray(queries, dtype=np.float32)


def check_batch(batch: FusedBatch) -> None:
    """Raise ``ValueError`` for a batch of inconsistent shapes or ids of no row kind."""
    n = len(batch.ids)
    ids = np.asarray(batch.ids)
    if (
        ids.shape != (n,)
        or np.shape(batch.times) != (n, 2)
        or batch.features.shape != (n, VISUAL_DIM + SEMANTIC_DIM)
    ):
        raise ValueError(
            f"malformed batch {batch.batch_id}: ids {ids.shape}, times {np.shape(batch.times)}, "
            f"features {batch.features.shape}"
        )
    if n and (ids < 0).any():
        raise ValueError(f"batch {batch.batch_id} has negative vector ids")
    if n and (kind_of(ids) == 1).any():
        raise ValueError(f"batch {batch.batch_id} has vector ids of no row kind (kind bits 01)")


def by_kind(ids: np.ndarray) -> list[tuple[int, np.ndarray | None]]:
    """The row kinds among ``ids``, each with the mask of its rows (None: all of them, the
    usual batch of one kind, which then needs no copy)."""
    if not len(ids):
        return []
    kinds = kind_of(ids)
    if kinds[0] == kinds[-1] and (kinds == kinds[0]).all():
        return [(int(kinds[0]), None)]
    return [(int(k), kinds == k) for k in np.unique(kinds)]
