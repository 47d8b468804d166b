"""Merge the per-shard top-k lists of a fan-out search into one global top-k per query."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from itertools import islice
from operator import itemgetter

import numpy as np

from vifusion.types import SearchHit, row_no, video_of

ShardResult = tuple[np.ndarray, np.ndarray, np.ndarray]  # scores (nq,k), ids (nq,k), times (nq,k,2)


def _rows(scores: np.ndarray, ids: np.ndarray, times: np.ndarray, q: int) -> Iterator[tuple]:
    for s, i, (t0, t1) in zip(scores[q].tolist(), ids[q].tolist(), times[q].tolist()):
        if i >= 0:
            yield s, i, t0, t1


def merge_topk(per_shard: list[ShardResult], k: int) -> list[list[SearchHit]]:
    """One list of at most k hits per query, best first, from the shards' sorted results.

    Each shard's rows must already be sorted by descending score (as FAISS returns them);
    -1 ids (missing results) are skipped. Ties keep shard order. All shards must have the
    same number of queries.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if not per_shard:
        return []
    nq = per_shard[0][0].shape[0]
    if any(r[0].shape[0] != nq or r[1].shape[0] != nq or r[2].shape[0] != nq for r in per_shard):
        raise ValueError("shard results disagree on the number of queries")
    out: list[list[SearchHit]] = []
    for q in range(nq):
        streams = [_rows(scores, ids, times, q) for scores, ids, times in per_shard]
        merged = heapq.merge(*streams, key=itemgetter(0), reverse=True)
        out.append(
            [
                SearchHit(
                    video_id=int(video_of(i)), t_start=t0, t_end=t1, score=s, row=int(row_no(i))
                )
                for s, i, t0, t1 in islice(merged, k)
            ]
        )
    return out
