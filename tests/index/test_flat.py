from __future__ import annotations

import faiss
import numpy as np
import pytest

from vifusion.index._flat import ChunkedFlat

D = 32
CHUNK = 100


@pytest.fixture()
def data():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1050, D)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ids = np.arange(len(x), dtype=np.int64) * 5 + 2
    return (
        ids,
        x,
        x[rng.integers(0, len(x), 20)] + 0.05 * rng.standard_normal((20, D)).astype(np.float32),
    )


def _both(ids: np.ndarray, x: np.ndarray) -> tuple[ChunkedFlat, faiss.Index]:
    """The chunked index and one IDMap2,Flat holding the same vectors (added in uneven batches)."""
    chunked, single = ChunkedFlat(D, chunk=CHUNK), faiss.IndexIDMap2(faiss.IndexFlatIP(D))
    for lo, hi in [(0, 7), (7, 250), (250, 251), (251, 1050)]:
        chunked.add_with_ids(x[lo:hi], ids[lo:hi])
        single.add_with_ids(x[lo:hi], ids[lo:hi])
    return chunked, single


def test_no_chunk_outgrows_its_size(data) -> None:
    ids, x, _ = data
    chunked, _ = _both(ids, x)
    assert chunked.ntotal == len(ids)
    blobs = chunked.serialize()
    assert len(blobs) == 11  # ten full chunks of 100 and the one taking adds
    assert all(faiss.deserialize_index(b).ntotal <= CHUNK for b in blobs)


@pytest.mark.parametrize("k", [1, 10, 250])  # 250: more than a chunk holds
def test_search_matches_one_flat_index(data, k) -> None:
    ids, x, queries = data
    chunked, single = _both(ids, x)
    got_s, got_i = chunked.search(queries, k)
    want_s, want_i = single.search(queries, k)
    np.testing.assert_allclose(got_s, want_s, rtol=1e-5)
    assert got_i.tolist() == want_i.tolist()


def test_filtered_search_and_padding_match_one_flat_index(data) -> None:
    ids, x, queries = data
    chunked, single = _both(ids, x)
    subset = ids[[3, 150, 420, 999]]  # in four different chunks
    params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(subset))
    got_s, got_i = chunked.search(queries, 6, params)
    want_s, want_i = single.search(queries, 6, params=params)
    assert got_i.tolist() == want_i.tolist()
    assert (got_i[:, 4:] == -1).all() and set(got_i[:, :4].ravel().tolist()) == set(subset.tolist())
    np.testing.assert_array_equal(got_s[:, 4:], want_s[:, 4:])


def test_remove_reconstruct_and_ids_across_chunks(data) -> None:
    ids, x, queries = data
    chunked, _ = _both(ids, x)
    picked = np.array([5, 105, 530, 1049])
    np.testing.assert_array_equal(chunked.reconstruct_batch(ids[picked[::-1]]), x[picked[::-1]])
    gone = ids[:300]  # three whole chunks and none of the rest
    assert chunked.remove_ids(faiss.IDSelectorBatch(gone)) == 300
    assert chunked.ntotal == len(ids) - 300
    assert sorted(chunked.ids().tolist()) == ids[300:].tolist()
    assert len(chunked.serialize()) == 8  # emptied chunks are gone
    _, got = chunked.search(queries, 50)
    assert not set(got.ravel().tolist()) & set(gone.tolist())
    with pytest.raises(KeyError, match=str(ids[0])):
        chunked.reconstruct_batch(ids[:1])
    chunked.add_with_ids(x[:1], ids[:1])  # re-added: into the chunk taking adds
    np.testing.assert_array_equal(chunked.reconstruct_batch(ids[:1]), x[:1])
    assert (
        chunked.remove_ids(faiss.IDSelectorBatch(ids[[350, 720]])) == 2
    )  # from chunks that take no adds
    assert chunked.ntotal == len(ids) - 301 == len(chunked.ids())


def test_serialized_chunks_come_back_the_same(data) -> None:
    ids, x, queries = data
    chunked, _ = _both(ids, x)
    back = ChunkedFlat.deserialize(chunked.serialize(), D)
    assert back.ntotal == chunked.ntotal == len(ids)
    for a, b in zip(chunked.search(queries, 10), back.search(queries, 10)):
        np.testing.assert_array_equal(a, b)
    assert len(ChunkedFlat.deserialize(ChunkedFlat(D).serialize(), D).serialize()) == 1
    with pytest.raises(ValueError, match="dim"):
        ChunkedFlat.deserialize(chunked.serialize(), D + 1)
    ivf = faiss.index_factory(D, "IVF4,Flat", faiss.METRIC_INNER_PRODUCT)
    with pytest.raises(ValueError, match="IDMap2,Flat"):
        ChunkedFlat.deserialize([faiss.serialize_index(ivf)], D)


@pytest.mark.skipif(
    not hasattr(__import__("resource"), "RUSAGE_THREAD"),
    reason="per-thread page faults are Linux's",
)
def test_a_chunk_made_ahead_takes_its_adds_without_new_memory() -> None:
    """Past half a chunk, the next one is made ahead with its whole capacity: the adds that
    fill it copy into memory already there (growing as it filled touched 2.3 pages for
    every page stored, on the thread every write waits for)."""
    import resource

    d, chunk = 1280, 1024
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2 * chunk, d)).astype(np.float32)
    index = ChunkedFlat(d, chunk=chunk)
    index.add_with_ids(x[:chunk], np.arange(chunk))
    index._next.get()  # made by now
    faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for lo in range(chunk, 2 * chunk, 64):
        index.add_with_ids(x[lo : lo + 64], np.arange(lo, lo + 64))
    faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - faults
    stored_pages = chunk * d * 4 // 4096
    assert faults < stored_pages // 10, (faults, stored_pages)
    assert index.ntotal == 2 * chunk
    _, got = index.search(x[[5, chunk + 5, 2 * chunk - 1]], 1)
    assert got.ravel().tolist() == [5, chunk + 5, 2 * chunk - 1]
