import numpy as np
import ray

from vifusion.comm import Transport
from vifusion.config import Config
from vifusion.index import Shard
from vifusion.types import SEMANTIC_DIM, VISUAL_DIM, FusedBatch, vector_id


def batch(video_id: int, first: int, n: int) -> FusedBatch:
    rng = np.random.default_rng(first)
    feats = rng.standard_normal((n, VISUAL_DIM + SEMANTIC_DIM)).astype(np.float32)
    feats[:, :VISUAL_DIM] /= np.linalg.norm(feats[:, :VISUAL_DIM], axis=1, keepdims=True)
    feats[:, VISUAL_DIM:] /= np.linalg.norm(feats[:, VISUAL_DIM:], axis=1, keepdims=True)
    ids = np.array([vector_id(video_id, first + i) for i in range(n)], np.int64)
    times = np.stack([np.arange(first, first + n), np.arange(first + 1, first + n + 1)], 1).astype(np.float32)
    return FusedBatch(ids=ids, times=times, features=feats)


def test_every_sent_batch_is_acknowledged_after_drain(ray_session, tmp_path):
    shard = ray.remote(Shard).remote(0, tmp_path, Config(faiss_threads=1))
    t = Transport(window=2)
    sent = [batch(5, i * 8, 8) for i in range(10)]  # 10 batches through a window of 2
    for b in sent:
        t.send(0, shard, b)
    t.drain(0)
    assert ray.get(shard.stats.remote())["vectors"] == {"visual": 80, "semantic": 80}
    assert (t.stats.batches, t.stats.frames) == (10, 80)
    assert t.stats.bytes == sum(b.nbytes for b in sent)
    # what arrived is what was sent: the last batch's first vector finds itself
    scores, ids, _ = ray.get(shard.search.remote("visual", sent[-1].space("visual")[:1], 1))
    assert ids[0, 0] == sent[-1].ids[0] and scores[0, 0] > 0.999
    ray.kill(shard)


def test_a_failed_send_does_not_leak_into_the_next_video(ray_session, tmp_path):
    shard = ray.remote(Shard).remote(0, tmp_path, Config(faiss_threads=1))
    t = Transport(window=4)
    broken = batch(1, 0, 2)
    broken.features = broken.features[:, :10]  # wrong width: the shard refuses it
    t.send(0, shard, broken)
    t.abandon(0)
    t.send(0, shard, batch(2, 0, 3))
    t.drain(0)  # would raise here if the earlier failure were still queued
    assert ray.get(shard.video_ids.remote()) == [2]
    ray.kill(shard)
