"""The codec tables a node aggregator uses: the newest saved ones, or ones it trains from
real rows, saved beside their measured quality (codec -> recall@10 on held-out rows)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from vifusion.comm.codec import Ladder, SharedTables, recall_at_k


def newest_tables(directory: Path) -> tuple[SharedTables | None, dict[str, float]]:
    """The newest saved tables under ``directory`` and their measured quality (codec ->
    recall@10); (None, {}) where none were saved."""
    found = sorted(Path(directory).glob("tables-*.npz"), key=lambda p: p.stat().st_mtime)
    if not found:
        return None, {}
    quality = found[-1].with_suffix(".json")
    return SharedTables.load(found[-1]), json.loads(quality.read_text()) if quality.exists() else {}


def train_tables(
    rows: np.ndarray, keep: tuple[float, float], directory: Path
) -> tuple[SharedTables, dict[str, float]]:
    """Tables trained on four fifths of ``rows``, their recall measured on the rest; both
    saved under ``directory``."""
    held_out = max(len(rows) // 5, 1)
    tables = SharedTables.train(rows[held_out:], keep=keep)
    quality = recall_at_k(Ladder(tables), rows[:held_out])
    path = tables.save(directory)
    path.with_suffix(".json").write_text(json.dumps(quality))
    return tables, quality
