"""What each stage costs on a node type, from a short real run of the code that does it.

On a generated video (``samples.write_video``: pans, zooms and moving shapes), with the
configuration's sampling: decoding (``open_sampled``, the decode thread's CPU time a second
of video, at the bitrate ``plan_video_mbps`` says, from a small and a lossless video),
embedding (``Embedder.embed_frames``: the process's CPU time, or the wall time on a GPU),
reading screen text where it is on (``ScreenReader``), the aggregator's dedup
(``TemporalDedup``: its CPU time a row, and the share of rows it keeps), and a shard's apply
and log sync (``Shard.stage`` and ``commit`` into a temporary directory). Costs are
core-seconds, so they carry over between machines with the same cores whatever their number.
Speech, where on, is measured on a generated talk (``_talks.write_talk``: espeak-ng's voice,
back to back): the speech model's process CPU per second of speech, charged per sampled frame
in ``text_cs`` with the screen text. Without espeak-ng it cannot be measured, and is logged.
A text search is measured in two parts: what an API replica does (``Searcher.text``: the
text's embedding, grouping, ranking), and a shard's search of the semantic space
(``_query_costs.py``).

Embedding is measured twice: alone, and with two processes embedding at once
(``embed_cs_crowded``), each with the threads an extractor takes beside another: half of
``Config.threads`` (``extract/actor.py``). Where a share below the node's cores is not a quota
the process can read, the threads still outnumber the cores, wait for them spinning, and a
frame costs more CPU. The CPU is process CPU time, not wall time, so the simulation can share
the node's cores out itself.

``calibrate`` runs this once per node type: as a Ray task on a node of that type on a live
cluster, here for a cluster not yet started (its node types are taken to have this
machine's cores, and no GPU is measured). Results are cached under ``DATA_DIR/plan/``, per
node type and model settings.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from vifusion.config import Config
from vifusion.datadir import CALIBRATION
from vifusion.plan._query_costs import query_cs, shard_search_costs
from vifusion.plan.hardware import Cluster, Node
from vifusion.plan.terms import StageCosts
from vifusion.samples.talks import have_espeak

log = logging.getLogger(__name__)
_PHOTOS = ("coffee", "rocket", "motion", "astronaut")


def _key(cfg: Config) -> str:
    """What the costs depend on besides the node: sampling, model settings, what is read."""
    parts = (
        cfg.sample_fps,
        cfg.embed_batch,
        cfg.conse_top_k,
        cfg.screen_text,
        cfg.ocr_frame_side,
        cfg.dedup_cosine if cfg.fusion else 2.0,
        cfg.torch_threads,
        (cfg.speech, str(cfg.speech_model_dir), cfg.speech_compute_type, cfg.speech_threads),
        cfg.speech and have_espeak(),  # measured once espeak-ng is there
        "efficientnet_lite0+MiniLM" if cfg.visual_model == "default" else cfg.visual_model,
        cfg.plan_video_mbps,  # decoding is measured at the bitrate planned for
        "crowded, threads split, decode by seconds, searches",  # older caches measured otherwise
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:10]


def measure(cfg: Config, scene_s: float = 3.0) -> StageCosts:
    """Run each stage on this machine and return what it cost."""
    import torch

    from vifusion.extract.actor import EMBED_SIDE
    from vifusion.extract.backbone import load_backbone
    from vifusion.extract.decode import open_sampled_with_text
    from vifusion.fusion.dedup import TemporalDedup
    from vifusion.index.shard import Shard
    from vifusion.samples import write_video
    from vifusion.types import FusedBatch

    torch.set_num_threads(cfg.torch_threads or cfg.threads)
    with tempfile.TemporaryDirectory(prefix="vf-calibrate-") as tmp:
        video = write_video(Path(tmp) / "v.mp4", _PHOTOS, scene_s=scene_s).path
        fps = max(cfg.sample_fps, 4.0)  # enough frames to time, whatever the sampling
        text_side = cfg.ocr_frame_side if cfg.screen_text else EMBED_SIDE
        _, total, batches = open_sampled_with_text(
            video, fps, cfg.max_frames, EMBED_SIDE, text_side, cfg.embed_batch
        )
        decoded, t = [], time.process_time()  # all threads: FFmpeg may decode on its own
        for frames, spans, texts in batches:
            decoded.append((frames, spans, texts))
        small = _Decoding.of(video, time.process_time() - t)
        dense = _decoding(cfg, Path(tmp), scene_s) if cfg.plan_video_mbps else None
        decode_cs = decode_cs_at(small, dense, cfg.plan_video_mbps, cfg.sample_fps)

        embedder = load_backbone(cfg)
        gpu = embedder.device.type == "cuda"
        embedder.embed_frames(decoded[0][0])  # warm up
        rows, t, w = [], time.process_time(), time.perf_counter()
        for frames, spans, _ in decoded:
            visual, semantic = embedder.embed_frames(frames)
            rows.append(
                FusedBatch.of_video(
                    1, sum(len(r) for r in rows), [(a, b) for _, a, b in spans], visual, semantic
                )
            )
        embed_cs, embed_wall = (time.process_time() - t) / total, (time.perf_counter() - w) / total

        text_cs = 0.0
        if cfg.screen_text:
            from vifusion.extract.screentext import ScreenReader

            tracker = ScreenReader(cfg, "cuda" if gpu else "cpu").track()
            t = time.process_time()
            for frames, spans, texts in decoded:
                for rgb, small, (_, a, b) in zip(texts, frames, spans, strict=True):
                    tracker.add(rgb, a, b, small=small)
            tracker.finish()
            text_cs = (time.process_time() - t) / total

        if cfg.speech:
            text_cs += speech_cs(cfg, Path(tmp), "cuda" if gpu else "cpu") / cfg.sample_fps

        dedup = TemporalDedup(cfg.dedup_cosine if cfg.fusion else 2.0)
        t, kept = time.thread_time(), 0
        for batch in rows:
            kept += len(dedup.push(batch))
        kept += len(dedup.close(1))
        aggregate_cs = (time.thread_time() - t) / total

        shard = Shard(0, Path(tmp) / "shard", cfg)
        one = FusedBatch.concat(rows)
        small = one.rows(slice(0, 1))
        t = time.process_time()
        for _ in range(20):
            shard.stage(FusedBatch(small.ids, small.times, small.features))  # a new batch id each
        message_cs = (time.process_time() - t) / 20
        t = time.process_time()
        seq = shard.stage(FusedBatch(one.ids, one.times, one.features))[1]
        apply_cs = max((time.process_time() - t - message_cs) / len(one), 0.0)
        syncs = [
            shard.commit(shard.stage(FusedBatch(small.ids, small.times, small.features))[1])
            for _ in range(10)
        ]
        shard.commit(seq)
        sync_s = float(np.median(syncs))
        query = query_cs(cfg, embedder, one, Path(tmp) / "searched")
    fixed, per_row = shard_search_costs(cfg)
    return StageCosts(
        decode_cs=decode_cs,
        embed_cs=0.0 if gpu else embed_cs,
        embed_gpu_s=embed_wall if gpu else 0.0,
        text_cs=text_cs,
        aggregate_cs=aggregate_cs,
        apply_cs=apply_cs,
        message_cs=message_cs,
        sync_s=sync_s,
        dedup_ratio=max(kept, 1) / total,
        embed_threads=cfg.torch_threads,
        query_cs=query,
        search_cs=fixed,
        search_row_cs=per_row,
    )


@dataclass(frozen=True)
class _Decoding:
    """What decoding one calibration video cost: core-seconds a second of video, at its
    bitrate (bits a second)."""

    cs_per_s: float
    bits_per_s: float

    @classmethod
    def of(cls, video: Path, cpu_s: float) -> _Decoding:
        from vifusion.extract.decode import probe

        seconds = probe(video).duration_s
        return cls(cpu_s / seconds, video.stat().st_size * 8 / seconds)


def _decoding(cfg: Config, folder: Path, scene_s: float) -> _Decoding:
    """Decoding a lossless video of the same scenes (x264 crf 0: about 3.6 Mbit/s)."""
    from vifusion.extract.actor import EMBED_SIDE
    from vifusion.extract.decode import open_sampled
    from vifusion.samples import write_video

    video = write_video(folder / "dense.mp4", _PHOTOS, scene_s=scene_s, crf=0).path
    _, _, batches = open_sampled(
        video, max(cfg.sample_fps, 4.0), cfg.max_frames, EMBED_SIDE, cfg.embed_batch
    )
    t = time.process_time()
    for _ in batches:
        pass
    return _Decoding.of(video, time.process_time() - t)


def decode_cs_at(
    small: _Decoding, dense: _Decoding | None, video_mbps: float, sample_fps: float
) -> float:
    """Core-seconds of decoding per sampled frame at ``sample_fps``, for videos of
    ``video_mbps``. Every frame is decoded, sampled or not, so the cost goes by seconds of
    video; and it grows with the bits read: taken on the line through the two videos
    measured, at the plan's bitrate (the small video's cost where less, or where only it
    was measured)."""
    per_s = small.cs_per_s
    rate = video_mbps * 1e6
    if dense is not None and dense.bits_per_s > small.bits_per_s and rate > small.bits_per_s:
        slope = max(dense.cs_per_s - small.cs_per_s, 0.0) / (dense.bits_per_s - small.bits_per_s)
        per_s += slope * (rate - small.bits_per_s)
    return per_s / sample_fps


_SAID = (
    "Welcome to the quarterly review of the northern rail project.",
    "The new bridge opened in March and carries twelve trains an hour.",
    "Next year we extend the line to the harbour and the airport.",
)


def speech_cs(cfg: Config, tmp: Path, device: str = "cpu") -> float:
    """Core-seconds the speech model spends on a second of speech (0 where espeak-ng, which
    says the test talk, is missing: logged). The model is loaded and run once before timing."""
    from vifusion.extract.speech import Transcriber
    from vifusion.samples.talks import write_talk

    if not have_espeak():
        log.warning(
            "speech is on but not calibrated: espeak-ng, which says the test talk, is not "
            "installed (apt-get install espeak-ng); the plan counts no CPU for speech"
        )
        return 0.0
    each_s = 5.0  # a sentence is said in about 4 s at espeak-ng's 150 words a minute
    said = tuple((0.3 + each_s * i, text) for i, text in enumerate(_SAID))
    talk = write_talk(tmp / "talk.mp4", each_s * len(_SAID), said=said, size=(320, 240)).path
    transcriber = Transcriber(cfg, device)
    transcriber.transcribe_file(talk)  # warm up
    t = time.process_time()
    transcriber.transcribe_file(talk)
    return (time.process_time() - t) / (each_s * len(_SAID))


def embed_cs(
    cfg: Config,
    barrier: Path | None = None,
    parties: int = 1,
    batches: int = 4,
    seconds: float = 0.0,
) -> float:
    """Core-seconds a frame costs to embed in this process, with the torch threads of an
    extractor among ``parties`` on its node (frames of the embedder's size: the cost depends
    on their size, not on what they show), over ``batches`` batches, or with ``seconds``, as
    many as start within that wall time (at least one: processes measured at once then
    embed over the same window, however slow each is). With a ``barrier`` directory,
    embedding starts once ``parties`` processes have loaded."""
    import torch

    from vifusion.extract.actor import EMBED_SIDE
    from vifusion.extract.backbone import load_backbone

    torch.set_num_threads(cfg.torch_threads or max(1, cfg.threads // parties))  # as the actor
    embedder = load_backbone(cfg)
    shape = (cfg.embed_batch, EMBED_SIDE, EMBED_SIDE, 3)
    frames = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    embedder.embed_frames(frames)  # warm up
    if barrier is not None:
        barrier.mkdir(parents=True, exist_ok=True)
        (barrier / f"ready-{time.monotonic_ns()}").touch()
        deadline = time.monotonic() + 120
        while len(list(barrier.iterdir())) < parties and time.monotonic() < deadline:
            time.sleep(0.05)
    t, wall, done = time.process_time(), time.monotonic(), 0
    while done < batches if not seconds else (not done or time.monotonic() - wall < seconds):
        embedder.embed_frames(frames)
        done += 1
    return (time.process_time() - t) / (done * len(frames))


def _crowded(costs: StageCosts, run_two: list[float]) -> StageCosts:
    """``costs`` with the crowded embedding cost: the mean of two embedding at once."""
    if costs.embed_gpu_s or not run_two:
        return costs
    return replace(costs, embed_cs_crowded=sum(run_two) / len(run_two))


def _here(cfg: Config) -> StageCosts:
    """Costs on this machine: the stages alone, then two processes embedding at once."""
    costs = measure(cfg)
    with tempfile.TemporaryDirectory(prefix="vf-calibrate-") as tmp:
        spawn = multiprocessing.get_context("spawn")  # torch's threads do not survive a fork
        with ProcessPoolExecutor(2, mp_context=spawn) as pool:
            two = [pool.submit(embed_cs, cfg, Path(tmp) / "barrier", 2) for _ in range(2)]
            return _crowded(costs, [f.result() for f in two])


def costs_from_dict(raw: dict[str, Any]) -> StageCosts:
    """Stage costs as JSON holds them (``asdict``: a cache file here, a plan's record)."""
    return StageCosts(**{**raw, "encode_cs": tuple(raw["encode_cs"])})


def calibrate(
    cfg: Config, cluster: Cluster, live: list[Node] | None = None, refresh: bool = False
) -> dict[str, StageCosts]:
    """Costs per node type: cached, or measured (on a live node of the type where there is
    one, else here)."""
    out: dict[str, StageCosts] = {}
    cache = cfg.data_dir / CALIBRATION
    here: StageCosts | None = None
    for t in cluster.types:
        path = cache / f"calibration-{t.name}-{_key(cfg)}.json"
        if path.exists() and not refresh:
            out[t.name] = costs_from_dict(json.loads(path.read_text()))
            continue
        node = next((n for n in live or [] if n.type.name == t.name and n.node_id), None)
        if node is not None:
            out[t.name] = _on_node(cfg, node.node_id, t.cpus)
        else:
            here = here or _here(cfg)
            out[t.name] = here
        cache.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(out[t.name])))
    return out


def _on_node(cfg: Config, node_id: str, cpus: float) -> StageCosts:
    """Costs on one live node, as Ray tasks there: the stages alone, then (where the node has
    CPUs for two extractors) two tasks embedding at once."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    where = {
        "num_cpus": 1,
        "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False),
    }
    costs = ray.get(ray.remote(measure).options(**where).remote(cfg))
    if cpus < 2:
        return costs
    barrier = Path(tempfile.gettempdir()) / f"vf-calibrate-{node_id[:12]}-{time.time_ns()}"
    task = ray.remote(embed_cs).options(**where)
    return _crowded(costs, ray.get([task.remote(cfg, barrier, 2) for _ in range(2)]))
