"""A compressed space's vector file read as re-ranking and re-training read it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from vifusion.index._vectors import RowMap, VectorStore

D = 64


def _flags_of_maps(path: Path) -> list[set[str]]:
    """The VmFlags of each of this process's memory maps of ``path`` (Linux's smaps)."""
    out: list[set[str]] = []
    mapped_here = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and ":" not in head[0]:  # a mapping's first line
            mapped_here = len(head) >= 6 and head[5] == str(path)
        elif mapped_here and line.startswith("VmFlags:"):
            out.append(set(head[1:]))
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_scattered_reads_go_through_a_map_advised_random_and_a_pass_through_one_read_ahead(
    tmp_path: Path,
) -> None:
    path = tmp_path / "visual.f16"
    store = VectorStore(path, D)
    x = np.random.default_rng(0).standard_normal((5000, D)).astype(np.float32)
    store.append(np.arange(5000), x)
    store.sync()

    rows = np.array([4000, 7, 2500, 123])
    np.testing.assert_array_equal(store.read_rows(rows), x[rows].astype(np.float16))
    # A search's candidates: each fault reads its page alone ("rr": VM_RAND_READ).
    assert [("rr" in f) for f in _flags_of_maps(path)] == [True]

    piece = np.arange(1000, 3000)
    np.testing.assert_array_equal(
        store.read_rows(piece, in_order=True), x[piece].astype(np.float16)
    )
    # A re-training's pass: a second map, left to the kernel's read-ahead.
    assert sorted(("rr" in f) for f in _flags_of_maps(path)) == [False, True]

    scores = store.inner_products(x[:2], np.array([[0, 1, -1], [1, 4999, 3]]))
    want = x[[[0, 1, 0], [1, 4999, 3]]].astype(np.float16).astype(np.float32) @ x[:2, :, None]
    np.testing.assert_allclose(scores[:, :2], want[:, :2, 0], rtol=1e-3)
    np.testing.assert_allclose(scores[1, 2], want[1, 2, 0], rtol=1e-3)
    assert scores[0, 2] == -np.finfo(np.float32).max  # no candidate


def test_a_cold_read_shared_among_threads_returns_every_row_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vifusion.index import _vectors

    store = VectorStore(tmp_path / "visual.f16", D)
    x = np.random.default_rng(0).standard_normal((5000, D)).astype(np.float32)
    store.append(np.arange(5000), x)
    store.sync()
    rows = np.random.default_rng(1).choice(5000, 1000, replace=False)
    want = x[rows].astype(np.float16)
    np.testing.assert_array_equal(store.read_rows(rows), want)  # cached: one thread
    monkeypatch.setattr(_vectors, "_PROBE_COLD_S", 0.0)  # every read judged cold
    np.testing.assert_array_equal(store.read_rows(rows), want)
    np.testing.assert_array_equal(store.read_rows(rows[:40]), want[:40])  # fewer than readers


def test_the_row_map_finds_ids_in_any_order_merged_or_recent() -> None:
    rng = np.random.default_rng(0)
    ids = rng.choice(1 << 40, 20_000, replace=False).astype(np.int64)
    rows = np.arange(len(ids), dtype=np.int32)
    m = RowMap()
    m.set(ids[:10_000], rows[:10_000])  # merged (past the recent dict's bound)
    m.set(ids[10_000:10_100], rows[10_000:10_100])  # still recent
    m.set(ids[:5], rows[-5:])  # replaced: the newest row wins
    want = dict(zip(ids[:10_100].tolist(), rows[:10_100].tolist()))
    want.update(zip(ids[:5].tolist(), rows[-5:].tolist()))
    asked = rng.permutation(ids[:10_100])[:3000]  # a re-ranking's scattered order
    assert m.get(asked).tolist() == [want[i] for i in asked.tolist()]
    with pytest.raises(KeyError):
        m.get(np.array([ids[-1]]))
