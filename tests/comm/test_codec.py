import pickle
from itertools import pairwise

import numpy as np
import pytest

from vifusion.comm.codec import Encoded, Ladder, SharedTables
from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FusedBatch

D = VISUAL_DIM + SEMANTIC_DIM
SPACES = ((0, VISUAL_DIM), (VISUAL_DIM, D))
NAMES = ("fp32", "fp16", "int8", "sparse", "pq")


def _unit(x: np.ndarray) -> np.ndarray:
    for lo, hi in SPACES:
        x[:, lo:hi] /= np.linalg.norm(x[:, lo:hi], axis=1, keepdims=True)
    return x.astype(np.float32)


def clustered(
    n: int, seed: int, clusters: int = 20, noise: float = 0.35
) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cluster of each row): like real frames, visual non-negative (ReLU) with many
    zeros and a few strong dims, semantic dense; both spaces unit norm."""
    rng = np.random.default_rng(1234)  # the same centres for every sample
    centres = rng.standard_normal((clusters, D)).astype(np.float32)
    centres[:, :VISUAL_DIM] *= rng.gamma(0.5, 1.0, VISUAL_DIM)  # uneven per-dim energy
    centres = _unit(centres)
    rng = np.random.default_rng(seed)
    label = rng.integers(0, clusters, n)
    x = centres[label] + rng.standard_normal((n, D)).astype(np.float32) * (
        noise / np.sqrt(SEMANTIC_DIM)
    )
    x[:, :VISUAL_DIM] = np.maximum(x[:, :VISUAL_DIM], 0)
    return _unit(x), label


@pytest.fixture(scope="module")
def tables() -> SharedTables:
    return SharedTables.train(clustered(1000, seed=1)[0], seed=0)  # the default keep / pq sizes


@pytest.fixture(scope="module")
def ladder(tables) -> Ladder:
    return Ladder(tables)


@pytest.fixture(scope="module")
def held_out() -> tuple[np.ndarray, np.ndarray]:
    return clustered(1000, seed=2)


def _topk(db: np.ndarray, q: np.ndarray, k: int = 10) -> np.ndarray:
    s = q @ db.T
    np.fill_diagonal(s, -np.inf)  # the queries are the database rows: not themselves
    return np.argsort(-s, axis=1, kind="stable")[:, :k]


# -- every codec ------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [0, 1, 37])
def test_round_trip_shape_dtype_and_exact_bytes(ladder, held_out, name, n):
    codec = ladder.get(name)
    x = held_out[0][:n]
    e = codec.encode(x)
    assert (e.codec, e.rows) == (name, n)
    assert e.version == ("" if name in ("fp32", "fp16", "int8") else ladder.tables.version)
    assert all(a.flags.c_contiguous for a in e.arrays)
    assert e.nbytes == codec.bytes_per_row * n  # the policy's arithmetic is exact
    y = ladder.decode(e)
    assert y.shape == (n, D) and y.dtype == np.float32 and y.flags.writeable


@pytest.mark.parametrize("name", NAMES)
def test_zero_rows_decode_to_zeros_without_warnings(ladder, held_out, name):
    x = held_out[0][:4].copy()
    x[0] = 0  # a whole row
    x[1, :VISUAL_DIM] = 0  # one space of a row
    with np.errstate(divide="raise", invalid="raise"):  # no 0/0 anywhere
        y = ladder.decode(ladder.get(name).encode(x))
    assert not y[0].any() and not y[1, :VISUAL_DIM].any()
    assert np.isfinite(y).all() and y[1, VISUAL_DIM:].any()


@pytest.mark.parametrize("name", NAMES)
def test_text_rows_round_trip_in_every_codec(ladder, name):
    """A speech or screen-text row (zero visual columns, a sentence embedding in the
    semantic ones) decodes with its visual columns exactly zero and a unit semantic vector,
    no NaN; the stateless codecs keep it within their bounds. (The table codecs are fit to
    frames: the transport sends a batch holding text rows in int8, see test_transport.)"""
    said = np.random.default_rng(7).standard_normal((50, SEMANTIC_DIM)).astype(np.float32)
    said /= np.linalg.norm(said, axis=1, keepdims=True)
    rows = FusedBatch.of_texts(1, "speech", 0, np.zeros((50, 2)), said).features
    with np.errstate(divide="raise", invalid="raise"):
        y = ladder.decode(ladder.get(name).encode(rows))
    assert np.isfinite(y).all() and not y[:, :VISUAL_DIM].any()
    np.testing.assert_allclose(np.linalg.norm(y[:, VISUAL_DIM:], axis=1), 1, atol=1e-3)
    if name in ("fp32", "fp16", "int8"):
        assert (np.sum(y[:, VISUAL_DIM:] * said, axis=1) > 0.999).all()


@pytest.mark.parametrize("name", NAMES[1:])
def test_lossy_codecs_reject_non_finite_input(ladder, held_out, name):
    x = held_out[0][:3].copy()
    x[2, VISUAL_DIM + 5] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ladder.get(name).encode(x)


def test_wrong_shape_is_rejected(ladder):
    with pytest.raises(ValueError, match="1664"):
        ladder.get("int8").encode(np.zeros((3, VISUAL_DIM), np.float32))


# -- per codec bounds ------------------------------------------------------------------


def test_fp32_is_bit_identical():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, D)).astype(np.float32)
    x[0, :6] = [-0.0, 0.0, np.float32(1e-45), np.finfo(np.float32).max, -np.inf, np.nan]
    x[1, :2] = [np.float32(1.0) + np.finfo(np.float32).eps, np.finfo(np.float32).tiny]
    ladder = Ladder()
    y = ladder.decode(ladder.get("fp32").encode(x))
    assert np.array_equal(x.view(np.uint32), y.view(np.uint32))
    assert y is not x


def test_fp16_within_half_an_ulp():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((50, D)).astype(np.float32)
    x[:10] *= np.float32(1e-6)  # subnormal in float16
    x[10:20] *= np.float32(1e3)
    y = Ladder().decode(Ladder().get("fp16").encode(x))
    err = np.abs(x.astype(np.float64) - y)
    assert (err <= np.maximum(2.0**-11 * np.abs(x), 2.0**-25)).all()
    with pytest.raises(ValueError, match="float16"):
        Ladder().get("fp16").encode(np.full((1, D), 7e4, np.float32))


def test_int8_within_bound_and_keeps_norms(held_out):
    x = held_out[0].copy()
    x[:5] *= 3.0  # not unit norm: the codec must not assume it
    codec = Ladder().get("int8")
    e = codec.encode(x)
    q, sent = e.arrays
    y = Ladder().decode(e)
    assert np.array_equal(
        y, q.astype(np.float32) * np.repeat(sent, [VISUAL_DIM, SEMANTIC_DIM], axis=1)
    )
    for i, (lo, hi) in enumerate(SPACES):
        s = np.abs(x[:, lo:hi]).max(axis=1) / 127
        bound = s / 2 + 127 * np.abs(sent[:, i] - s)  # the documented bound
        assert (np.abs(x[:, lo:hi] - y[:, lo:hi]).max(axis=1) <= bound * (1 + 1e-5)).all()
        assert np.abs(sent[:, i] / s - 1).max() < 1e-2  # so the bound is close to s/2
        assert (np.abs(q[:, lo:hi]) <= 127).all() and (np.abs(q[:, lo:hi]).max(axis=1) == 127).all()
        np.testing.assert_allclose(
            np.linalg.norm(y[:, lo:hi], axis=1), np.linalg.norm(x[:, lo:hi], axis=1), rtol=1e-5
        )


def test_sparse_zeros_off_the_mask_and_int8_on_it(ladder, held_out):
    x = held_out[0][:200]
    e = ladder.get("sparse").encode(x)
    y = ladder.decode(e)
    q, sent = e.arrays
    at = 0
    for i, ((lo, hi), mask) in enumerate(zip(SPACES, ladder.tables.masks)):
        off = np.setdiff1d(np.arange(hi - lo), mask)
        assert not y[:, lo + off].any()  # exactly zero off the mask
        kept, qi = x[:, lo + mask], q[:, at : at + len(mask)]
        at += len(mask)
        assert np.array_equal(y[:, lo + mask], qi.astype(np.float32) * sent[:, i : i + 1])
        s = np.abs(kept).max(axis=1, keepdims=True) / 127
        assert (
            np.abs(kept - qi * s) <= s / 2 * (1 + 1e-5)
        ).all()  # the int8 bound on the kept dims
        # the decoded space keeps the original's full norm (dropped energy spread on the mask)
        np.testing.assert_allclose(np.linalg.norm(y[:, lo:hi], axis=1), 1.0, rtol=1e-5)


def test_default_sizes_halve_down_the_ladder(ladder, tables):
    assert [len(m) for m in tables.masks] == [512, 307]  # keep (0.4, 0.8)
    assert [c.shape for c in tables.pq] == [(160, 256, 8), (192, 256, 2)]
    assert [c.bytes_per_row for c in ladder.codecs] == [6656, 3328, 1672, 827, 360]


def test_pq_close_to_exact_on_clustered_data(ladder, held_out):
    x, label = held_out
    y = ladder.decode(ladder.get("pq").encode(x))
    for lo, hi in SPACES:
        xs, ys = x[:, lo:hi], y[:, lo:hi]
        spread = np.mean(np.sum((xs - xs.mean(axis=0)) ** 2, axis=1))
        err = np.mean(np.sum((xs - ys) ** 2, axis=1))
        assert err < 0.25 * spread
        exact, approx = _topk(xs, xs), _topk(ys, xs)
        recall = np.mean([len(np.intersect1d(a, b)) / 10 for a, b in zip(exact, approx)])
        assert recall >= 0.5  # within-cluster order is noise; the floor is far above chance (~0.02)
        assert np.mean(label[approx] == label[:, None]) >= 0.99  # the cluster ("video") is right


# -- tables and the ladder ----------------------------------------------------------------


def test_tables_save_load_round_trip(tmp_path, tables, held_out):
    path = tables.save(tmp_path / "codec")
    assert path == tmp_path / "codec" / f"tables-{tables.version}.npz"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left
    loaded = SharedTables.load(path)
    assert loaded.version == tables.version
    x = held_out[0][:50]
    for name in ("sparse", "pq"):
        a, b = Ladder(tables).get(name), Ladder(loaded).get(name)
        ea, eb = a.encode(x), b.encode(x)
        assert all(np.array_equal(u, v) for u, v in zip(ea.arrays, eb.arrays))
        assert np.array_equal(Ladder(tables).decode(eb), Ladder(loaded).decode(ea))


def test_tampered_tables_file_is_refused(tmp_path, tables):
    arrays = dict(np.load(tables.save(tmp_path)))
    arrays["pq_semantic"] = arrays["pq_semantic"] + np.float32(1e-3)
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match="does not match"):
        SharedTables.load(tmp_path / "bad.npz")


def test_training_is_deterministic_and_versions_differ_with_content():
    x = clustered(300, seed=5)[0]
    a = SharedTables.train(x, pq_dims_per_sub=16, seed=0)
    b = SharedTables.train(x, pq_dims_per_sub=16, seed=0)
    c = SharedTables.train(x, pq_dims_per_sub=16, seed=1)
    assert a.version == b.version != c.version
    assert len(a.version) == 12
    with pytest.raises(ValueError, match="256 rows"):
        SharedTables.train(x[:100])
    with pytest.raises(ValueError, match="keep"):
        SharedTables.train(x, keep=0)
    with pytest.raises(ValueError, match="pq_dims_per_sub"):
        SharedTables.train(x, pq_dims_per_sub=3)


def test_other_tables_or_none_are_refused_clearly(ladder, tables, held_out):
    other = SharedTables.of((tables.pq[0], tables.pq[1][:, ::-1].copy()), tables.masks)
    assert other.version != tables.version
    e = ladder.get("pq").encode(held_out[0][:3])
    with pytest.raises(
        ValueError,
        match=f"codec pq version {tables.version} unknown here: this node has {other.version}",
    ):
        Ladder(other).decode(e)
    with pytest.raises(ValueError, match="no shared tables"):
        Ladder().decode(ladder.get("sparse").encode(held_out[0][:3]))


def test_unknown_codec_is_a_value_error(ladder):
    with pytest.raises(ValueError, match="unknown codec 'zstd'"):
        ladder.get("zstd")
    with pytest.raises(ValueError, match="unknown codec 'zstd'"):
        ladder.decode(Encoded("zstd", "", 0, ()))
    with pytest.raises(ValueError, match="malformed"):
        ladder.decode(Encoded("int8", "", 2, (np.zeros((2, D), np.int8),)))


def test_ladder_order_levels_and_names(ladder):
    assert [c.name for c in ladder.codecs] == list(NAMES)
    assert [c.level for c in ladder.codecs] == list(range(len(NAMES)))
    sizes = [c.bytes_per_row for c in ladder.codecs]
    assert all(a > b for a, b in pairwise(sizes))
    assert [c.lossless for c in ladder.codecs] == [True, False, False, False, False]
    assert [c.name for c in Ladder().codecs] == ["fp32", "fp16", "int8"]


def test_tables_that_break_the_order_are_refused(tables):
    everything = tuple(np.arange(d, dtype=np.int32) for d in (VISUAL_DIM, SEMANTIC_DIM))
    with pytest.raises(ValueError, match="out of order"):
        Ladder(
            SharedTables.of(tables.pq, everything)
        )  # sparse keeping all dims is no smaller than int8


def test_ladder_and_tables_pickle(ladder, held_out):
    x = held_out[0][:20]
    e = ladder.get("pq").encode(x)
    copy = pickle.loads(pickle.dumps(ladder))  # the faiss objects are rebuilt on use
    assert np.array_equal(copy.decode(copy.get("pq").encode(x)), ladder.decode(e))
    tables = pickle.loads(pickle.dumps(ladder.tables))
    assert tables.version == ladder.tables.version
    assert np.array_equal(Ladder(tables).decode(pickle.loads(pickle.dumps(e))), ladder.decode(e))


def test_with_keep_chooses_the_masks_train_would_and_keeps_pq(tables):
    x = clustered(1000, seed=1)[0]
    other = tables.with_keep(x, (0.25, 0.5))
    assert [len(m) for m in other.masks] == [320, 192]
    assert all(np.array_equal(a, b) for a, b in zip(other.pq, tables.pq))
    assert other.version != tables.version
    assert Ladder(other).get("sparse").bytes_per_row == 320 + 192 + 8
    # the same masks training with that keep picks (training spends its time on pq)
    assert all(
        np.array_equal(a, b) for a, b in zip(tables.with_keep(x, (0.4, 0.8)).masks, tables.masks)
    )
    with pytest.raises(ValueError, match="keep"):
        tables.with_keep(x, 1.5)
