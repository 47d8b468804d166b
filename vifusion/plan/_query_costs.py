"""What a text search costs, for ``calibrate.py``: at an API replica (``query_cs``: the text's
embedding, grouping, ranking) and at one shard (``shard_search_costs``: its fixed part and its
part a row the shard holds)."""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from vifusion.config import Config

_QUERIES = ("a red car on a bridge", "people talking at a table", "a rocket taking off")
_SEARCH_ROWS = (2_000, 20_000)  # two sizes of a shard: a search's fixed part and its part a row
_FETCHED = 200  # frames a text search asks each shard for (``Searcher._frames_to_fetch(10)``)


def query_cs(cfg: Config, embedder: Any, rows: Any, folder: Path) -> float:
    """Core-seconds an API replica spends on a text search, the shards' part left out
    (``shard_search_costs`` measures it): ``Searcher.text`` of what is seen, on ``Config.query_threads``
    torch threads, over a real catalog and a real shard holding ``rows`` (in ``folder``),
    less the same searches of the shard alone. Not counted: Ray's calls to the shards."""
    import torch

    from vifusion.catalog import open_catalog
    from vifusion.index.layout import check_layout, shard_dir
    from vifusion.index.local import LocalShards
    from vifusion.index.shard import Shard
    from vifusion.query.searcher import Searcher

    one = cfg.updated({"data_dir": folder, "num_shards": 1, "catalog_url": None})  # scratch
    check_layout(folder, 1)
    shard = Shard(0, shard_dir(folder, 0), one)
    shard.commit(shard.stage(rows)[1])
    shards, catalog = LocalShards(one), open_catalog(one)
    searcher = Searcher(one, shards, embedder, catalog)
    before = torch.get_num_threads()
    torch.set_num_threads(cfg.query_threads)
    try:
        searcher.text(_QUERIES[0], modalities=("visual",))  # warm up
        t = time.process_time()
        for q in _QUERIES * 3:
            searcher.text(q, modalities=("visual",))
        whole = time.process_time() - t
        vectors = [embedder.embed_text([q]) for q in _QUERIES * 3]
        t = time.process_time()
        for v in vectors:
            shards.search("semantic", v, _FETCHED)
        return max(whole - (time.process_time() - t), 0.0) / len(vectors)
    finally:
        torch.set_num_threads(before)
        shards.close()
        catalog.close()


def shard_search_costs(cfg: Config) -> tuple[float, float]:
    """Core-seconds a search of one shard costs (``Shard.search`` of the semantic space, as a
    text search asks it): its fixed part and its part a row the shard holds, from shards of
    two sizes (random unit vectors: a search's cost does not depend on what they hold). In a
    child process with ``OMP_WAIT_POLICY=PASSIVE``, as a shard replica runs (FAISS's threads
    would otherwise spin after each search, and count)."""
    was = os.environ.get("OMP_WAIT_POLICY")
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # the child starts with it (read as OpenMP loads)
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            return pool.submit(_shard_search_costs, cfg).result()
    finally:
        if was is None:
            os.environ.pop("OMP_WAIT_POLICY")
        else:
            os.environ["OMP_WAIT_POLICY"] = was


def _shard_search_costs(cfg: Config) -> tuple[float, float]:
    from vifusion.index.shard import Shard
    from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FusedBatch

    rng = np.random.default_rng(0)

    def unit(n: int, d: int) -> np.ndarray:
        v = rng.standard_normal((n, d)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    query, costs = unit(1, SEMANTIC_DIM), []
    with tempfile.TemporaryDirectory(prefix="vf-calibrate-") as tmp:
        shard, held, video = Shard(0, Path(tmp) / "shard", cfg), 0, 1
        for rows in _SEARCH_ROWS:
            while held < rows:
                n = min(4096, rows - held)
                batch = FusedBatch.of_video(
                    video, 0, np.zeros((n, 2)), unit(n, VISUAL_DIM), unit(n, SEMANTIC_DIM)
                )
                shard.commit(shard.stage(batch)[1])
                held, video = held + n, video + 1
            shard.search("semantic", query, _FETCHED)  # warm up
            t = time.process_time()
            for _ in range(20):
                shard.search("semantic", query, _FETCHED)
            costs.append((time.process_time() - t) / 20)
    (small, big), (n0, n1) = costs, _SEARCH_ROWS
    row_cs = max(big - small, 0.0) / (n1 - n0)
    return max(small - row_cs * n0, 0.0), row_cs
