from __future__ import annotations

import faiss
import numpy as np
import pytest

from vifusion.index.space import FLAT, IndexPolicy, SpaceIndex

D = 96


def _clustered(
    rng: np.random.Generator, n: int, centers: np.ndarray, noise: float = 0.1
) -> np.ndarray:
    x = centers[rng.integers(0, len(centers), n)] + noise * rng.standard_normal(
        (n, centers.shape[1])
    )
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((40, D)) / np.sqrt(D)
    base = _clustered(rng, 6000, centers)
    ids = np.arange(6000, dtype=np.int64) * 7 + 3  # sparse ids, as real vector ids are
    queries = _clustered(rng, 100, centers)
    return ids, base, queries


def _exact(base: np.ndarray, ids: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    return ids[np.argsort(-(queries @ base.T), axis=1)[:, :k]]


def _recall(got: np.ndarray, want: np.ndarray) -> float:
    return float(
        np.mean([len(set(g) & set(w)) / len(w) for g, w in zip(got.tolist(), want.tolist())])
    )


def _policy(exact_max: int, codec: str = "SQ8") -> IndexPolicy:
    return IndexPolicy(exact_max, nprobe=16, codec=codec)


def test_factory_by_size() -> None:
    assert _policy(100).factory_for(10) == FLAT
    assert _policy(100).factory_for(100) == FLAT
    assert _policy(100).factory_for(6000) == "IVF128,SQ8"
    assert _policy(50_000, "SQfp16").factory_for(1_000_000) == "IVF2048,SQfp16"
    assert _policy(1).factory_for(10**11).startswith("IVF65536,")  # bounded
    with pytest.raises(ValueError, match="codec"):
        IndexPolicy(codec="PQ4")


@pytest.mark.parametrize(
    "exact_max, codec, factory, min_recall",
    [
        (10_000, "SQ8", FLAT, 1.0),
        (1000, "SQ8", "IVF128,SQ8", 0.95),
        (1000, "SQfp16", "IVF128,SQfp16", 0.99),
    ],
)
def test_recall_against_brute_force_for_every_index_type(
    data, exact_max, codec, factory, min_recall
) -> None:
    ids, base, queries = data
    space = SpaceIndex.build(D, _policy(exact_max, codec), ids=ids, vectors=base)
    assert space.factory == factory and space.ntotal == len(ids)
    _, got = space.search(queries, 10)
    assert _recall(got, _exact(base, ids, queries, 10)) >= min_recall


def test_ivf_removes_reads_back_and_filters_exactly(data) -> None:
    ids, base, queries = data
    space = SpaceIndex.build(D, _policy(1000), ids=ids, vectors=base)
    assert not space.is_flat
    np.testing.assert_allclose(space.reconstruct(ids[:5]), base[:5], atol=0.02)  # 8-bit codes
    gone = ids[::2]
    assert space.remove(gone) == len(gone)
    assert space.remove(gone) == 0
    assert space.ntotal == len(ids) - len(gone)
    _, got = space.search(queries, 20)
    assert not set(got.ravel().tolist()) & set(gone.tolist())
    assert sorted(space.all_ids().tolist()) == ids[1::2].tolist()
    # A filter on a few ids: the exact top-k among them, none lost to IVF probing.
    subset = ids[1::2][:300]
    _, got = space.search(queries, 10, subset=subset)
    keep = np.isin(ids, subset)
    want = _exact(space.reconstruct(ids[keep]), ids[keep], queries, 10)
    assert got.tolist() == want.tolist()
    _, few = space.search(queries[:1], 10, subset=subset[:3])
    assert sorted(few[0, :3].tolist()) == sorted(subset[:3].tolist()) and (few[0, 3:] == -1).all()


def test_serialized_index_comes_back_the_same(data) -> None:
    ids, base, queries = data
    for exact_max in (10_000, 1000):
        space = SpaceIndex.build(D, _policy(exact_max), ids=ids, vectors=base)
        back = SpaceIndex.deserialize(
            space.serialize(), D, _policy(exact_max), space.factory, space.trained_n
        )
        for a, b in zip(space.search(queries, 10), back.search(queries, 10)):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="dim"):
        SpaceIndex.deserialize(
            space.serialize(), D + 1, _policy(1000), space.factory, space.trained_n
        )


def test_rebuild_is_due_when_the_type_no_longer_suits(data) -> None:
    ids, base, _ = data
    flat = SpaceIndex(D, _policy(100))
    flat.add(ids[:100], base[:100])
    assert not flat.needs_rebuild()
    flat.add(ids[100:101], base[100:101])
    assert flat.needs_rebuild()
    ivf = SpaceIndex.build(D, _policy(100), ids[:1000], base[:1000])
    assert ivf.trained_n == 1000 and not ivf.needs_rebuild()
    ivf.add(ids[1000:4000], base[1000:4000])
    assert ivf.needs_rebuild()


@pytest.mark.parametrize(
    "args, named",
    [
        (dict(nprobe=0), "nprobe=0"),
        (dict(exact_max=-1), "exact_max=-1"),
    ],
)
def test_policy_refuses_limits_out_of_range(args: dict, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        IndexPolicy(**args)


def test_a_compressed_space_built_from_a_file_written_out_of_id_order(data, tmp_path) -> None:
    """Videos arrive interleaved, so the file's rows are not in id order, and a replaced
    vector's old row stays (dead): the space built from it re-ranks each id with its own
    newest vector."""
    from vifusion.index._vectors import VectorStore

    ids, base, queries = data
    store = VectorStore(tmp_path / "semantic.f16", D)
    shuffled = np.random.default_rng(1).permutation(len(ids))
    stale = np.roll(base[:100], 1, axis=0)  # rows 0..99 later replaced by the true ones
    store.append(ids[:100], stale)
    store.append(ids[shuffled], base[shuffled])
    held = np.sort(ids)
    space = SpaceIndex.build_compressed(
        D,
        IndexPolicy(100, nprobe=16, compress_min=1000, pq_text=32),
        held,
        store.ids.get(held),
        store,
    )
    assert space.compressed and space.ntotal == len(ids)
    np.testing.assert_array_equal(space.reconstruct(ids[:5]), base[:5].astype(np.float16))
    scores, got = space.search(base[:100], 1)
    assert (got[:, 0] == ids[:100]).all()  # each finds itself, scored by its newest row
    assert np.allclose(scores[:, 0], 1.0, atol=2e-3)
    assert _recall(space.search(queries, 10)[1], _exact(base, ids, queries, 10)) >= 0.95


def test_a_search_visits_a_share_of_a_large_spaces_lists() -> None:
    policy = IndexPolicy(nprobe=32)
    assert policy.nprobe_for(64) == 32  # a small space: the set count
    assert policy.nprobe_for(1024) == 32
    assert policy.nprobe_for(8192) == 256  # ten million frames: a 32nd of the lists
    assert policy.nprobe_for(16) == 16  # never more lists than there are


def test_rebuild_is_due_when_the_codec_is_no_longer_the_policys(data) -> None:
    ids, base, _ = data
    ivf = SpaceIndex.build(D, _policy(100), ids[:1000], base[:1000])
    assert ivf.factory.endswith(",SQ8")
    same = SpaceIndex(D, _policy(100), ivf.factory, ivf.index, ivf.trained_n)
    assert not same.needs_rebuild()
    changed = SpaceIndex(D, _policy(100, "SQfp16"), ivf.factory, ivf.index, ivf.trained_n)
    assert changed.needs_rebuild()


def test_a_lone_query_gets_the_answer_it_gets_in_a_batch(data) -> None:
    ids, base, queries = data
    space = SpaceIndex.build(D, _policy(1000, "SQfp16"), ids=ids, vectors=base)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(2)  # a lone query's lists split over threads
    try:
        scores, got = space.search(queries, 10)
        for i in range(len(queries)):
            s, g = space.search(queries[i : i + 1], 10)
            np.testing.assert_array_equal(g[0], got[i])
            np.testing.assert_allclose(s[0], scores[i], rtol=1e-6)
    finally:
        faiss.omp_set_num_threads(threads)
