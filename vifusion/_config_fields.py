"""The stages' settings, one group per stage (fusion/ + comm/, index/; extract/'s in
``_config_extract.py``), which ``Config`` inherits: every setting is still one field of the
one flat ``Config``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from vifusion._limits import within
from vifusion.types import SEMANTIC_DIM, VISUAL_DIM


def threads_field(what: str) -> Any:
    """A thread count whose 0 means what it means for every pool here: one thread per core
    this process may use (``_cores.usable_cores``: its CPU affinity and cgroup quota)."""
    return Field(
        0,
        ge=0,
        description=f"{what}; 0: one per core this process may use (its CPU affinity and cgroup quota)",
    )


class FusionFields(BaseModel):
    """fusion/ + comm/: the node aggregator, its batches and the codecs."""

    fusion: bool = Field(
        True,
        description="merge frames into large transfers (and near-duplicates into one "
        "vector); off: one message per frame, as a baseline",
    )
    fusion_latency_target_s: float = Field(
        0.2,
        gt=0,
        description="aim for extraction -> searchable; a fused batch waits at most a quarter of it",
    )
    fusion_min_bytes: int = Field(
        64 << 10, gt=0, description="smallest fused batch the policy picks (wire bytes)"
    )
    fusion_max_bytes: int = Field(
        8 << 20, gt=0, description="largest fused batch the policy picks (wire bytes)"
    )
    fusion_local_handoff: bool = Field(
        True,
        description="extractors hand rows to their node's aggregator "
        "through a local socket instead of an actor call",
    )
    fusion_stream: bool = Field(
        True,
        description="aggregators send fused batches to a shard's primary over a "
        "TCP connection (authenticated by a secret from an actor call) instead of "
        "actor calls; the primary listens on its node's address, on a port of the OS's choosing",
    )
    dedup_cosine: float = Field(
        0.98,
        gt=0,
        description="consecutive frames of a video this similar (cosine, both "
        "spaces) are sent as one vector with a time range; above 1: off",
    )
    compression: Literal["adaptive", "off"] = Field(
        "adaptive",
        description="adaptive: compress only while a link is "
        "congested (fp16, int8, sparse, pq); off: always exact fp32",
    )
    codec_min_recall: float = Field(
        0.99,
        ge=0,
        le=1,
        description="the table codecs (sparse, pq) are used only "
        "where their recall@10 on held-out rows of this data reaches this",
    )
    codec_train_rows: int = Field(
        4096,
        gt=0,
        description="rows the pq / sparse tables are trained on (once, saved under data_dir/codec)",
    )
    codec_sparse_keep: tuple[float, float] = Field(
        (0.4, 0.8),
        description="share of each space's dimensions "
        "(visual, semantic) the sparse codec sends, in (0, 1]: those "
        "with the most energy in the training rows; it costs the kept "
        "dims + 8 bytes a row, between pq's 360 and int8's 1672. "
        "The ladder uses it only where its measured recall reaches "
        "codec_min_recall: on the benchmark's frames from (0.8, 0.8) "
        "(benchmarks/sparse_keep.py)",
    )

    @field_validator("codec_sparse_keep", mode="before")
    @classmethod
    def _keep_pair(cls, v: Any) -> Any:
        # From the environment: VIFUSION_CODEC_SPARSE_KEEP=0.4,0.8; one number keeps that share of both.
        parts = v.split(",") if isinstance(v, str) else v
        if isinstance(parts, int | float):
            parts = [parts]
        return parts * 2 if isinstance(parts, list | tuple) and len(parts) == 1 else parts

    @field_validator("codec_sparse_keep")
    @classmethod
    def _keep_in_range(cls, v: tuple[float, float]) -> tuple[float, float]:
        for space, keep in zip(("visual", "semantic"), v, strict=True):
            within(f"codec_sparse_keep ({space})", keep, 0.0, 1.0, above_low=True)
        # Sparse is the rung between int8 and pq on the ladder (each rung smaller than the one
        # above): it sends its kept dims as int8 with int8's scales, so keeping them all would
        # make it int8 again, and keeping no more dims than pq sends codes (one a sub-quantizer:
        # 8 visual, 2 semantic dims each, the tables' defaults) would make it no larger than pq.
        kept = sum(max(1, round(k * d)) for k, d in zip(v, (VISUAL_DIM, SEMANTIC_DIM), strict=True))
        if kept >= VISUAL_DIM + SEMANTIC_DIM:
            raise ValueError(
                f"codec_sparse_keep={v!r} keeps all {kept} dimensions: that is int8, not sparse"
            )
        if kept <= (pq := VISUAL_DIM // 8 + SEMANTIC_DIM // 2):
            raise ValueError(
                f"codec_sparse_keep={v!r} keeps {kept} dimensions, no more than pq's {pq} codes: "
                "sparse would be no larger than pq"
            )
        return v


class IndexFields(BaseModel):
    """index/: shards, their replicas and their FAISS indexes."""

    num_shards: int = Field(
        2, gt=0, description="index shards; a video's rows all go to shard video_id mod this"
    )
    faiss_threads: int = threads_field("FAISS threads")
    index_exact_max: int = Field(
        50_000,
        gt=0,
        description="vectors per shard and space kept in an exact flat index; "
        "past it, a trained IVF index with index_codec vectors (approximate)",
    )
    index_codec: Literal["SQfp16", "SQ8"] = Field(
        "SQfp16",
        description="vectors in a trained index: SQfp16 "
        "(2 bytes a dimension, near-exact scores) or SQ8 (1 byte, ~3% lower recall)",
    )
    index_nprobe: int = Field(
        32,
        gt=0,
        description="inverted lists an IVF search visits at least (recall against speed); a "
        "space of more than 32 times as many lists visits a 32nd of them",
    )
    # PQ trains well from 100,000 vectors (FAISS asks 39 x 256 points a sub-quantizer); past
    # 250,000 frames a shard's fp16 index holds 0.85 GB, and compressed the same shard held
    # 186 bytes a frame at recall@10 0.97 (docs/benchmarks.md, "Compressed spaces").
    index_compress_min: int = Field(
        250_000,
        ge=0,
        description="vectors per shard and space past which a space is compressed "
        "(IVF-PQ in memory, exact fp16 vectors in a file on disk for re-ranking); 0: never",
    )
    index_pq_visual_bytes: int = Field(
        64, gt=0, description="PQ code bytes a 1280-d visual vector (a divisor of 1280)"
    )
    # 64, not 32: at ten million distinct frames a shard, 32 bytes kept the true top 10 of a
    # text query out of its 1,000 candidates (docs/benchmarks.md, "Recall at ten million").
    index_pq_text_bytes: int = Field(
        64, gt=0, description="PQ code bytes a 384-d semantic/text vector (a divisor of 384)"
    )
    # At a million frames recall@10 was bound by how deep the re-ranking reaches, not by
    # nprobe (docs/benchmarks.md, "Compressed spaces at a million frames").
    index_refine: int = Field(
        100,
        gt=0,
        description="a compressed search re-scores k times this many candidates with their "
        "exact vectors",
    )
    snapshot_log_bytes: int = Field(
        256 << 20,
        gt=0,
        description="write-ahead log bytes that trigger a background "
        "snapshot (or half the last snapshot's size, if larger)",
    )
    shard_replicas: int = Field(
        1, gt=0, description="copies of each shard; searches spread over them, writes go to all"
    )
    shard_ack_replicas: int | None = Field(
        None,
        ge=0,
        description="followers a write must be logged on, besides the primary, before it is "
        "acknowledged (the others get it in the background); at most shard_replicas - 1; "
        "None: 1 where shard_replicas > 1",
    )
    search_shard_timeout_s: float = Field(
        10.0,
        gt=0,
        description="a shard that has not answered a search by then "
        "(restarting, say) is left out: the answer is partial, naming it",
    )
    query_fusion: bool = Field(  # query batching; the key keeps its first name
        True, description="query batching: concurrent searches merged into one call per shard"
    )
    query_batch_max: int = Field(256, gt=0, description="most queries batched into one call")
    query_window: int = Field(
        2,
        gt=0,
        description="batched calls in flight per space before new queries wait to join the next",
    )
    query_wait_ms: float = Field(
        5.0, ge=0, description="longest a query waits for a batched call to join"
    )
    segment_gap_s: float = Field(
        0.0, ge=0, description="max gap joining frames into a segment; 0: 1.5 / sample_fps"
    )
    min_relative_score: float = Field(
        0.3,
        ge=0,
        le=1,
        description="a search drops moments scoring under this "
        "fraction of its best moment's score (a tail of weak look-alikes); 0: none "
        "dropped. 0.3 never cut a right moment on the benchmark corpora "
        "(benchmarks/cutoff.py)",
    )
    dictionaries: tuple[Path, ...] = Field(
        (Path("/usr/share/dictd"),),
        description="directories of English -> other language dictionaries (FreeDict's "
        "dictd files, as Debian's dict-freedict-eng-* packages install them, or en-XX.tsv): an "
        "English query also finds speech, and on-screen text of videos speaking them, that "
        "says its words in those languages (query/lexicon.py); none found: by meaning only",
    )
    segment_drop: float = Field(
        0.25,
        ge=0,
        le=1,
        description="a segment ends where the score falls below (1 - this) x its peak",
    )

    @property
    def ack_replicas(self) -> int:
        """Followers a write waits for (``shard_ack_replicas``, or its default)."""
        if self.shard_ack_replicas is not None:
            return self.shard_ack_replicas
        return min(1, self.shard_replicas - 1)


class HookFields(BaseModel):
    """hooks/: delivering webhook events (vifusion/hooks/delivery.py)."""

    hook_timeout_s: float = Field(
        5.0,
        gt=0,
        le=60,
        description="a webhook receiver that has not answered by then failed this attempt",
    )
    hook_retry_base_s: float = Field(
        10.0,
        gt=0,
        description="the wait after a webhook delivery's first failed attempt; doubled after each "
        "(up to hook_retry_max_s), each wait drawn between half and all of it",
    )
    hook_retry_max_s: float = Field(
        3600.0, gt=0, description="the longest wait between two attempts of a webhook delivery"
    )
    hook_retry_window_s: float = Field(
        86400.0,
        gt=0,
        description="a webhook delivery still refused this long after its event is failed",
    )
    hook_poll_s: float = Field(
        1.0, gt=0, description="how often the outbox is looked at for deliveries due"
    )
