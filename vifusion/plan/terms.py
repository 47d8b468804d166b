"""The terms that the simulation (``simulate.py``), its parts and the placement search
(``placement_search.py``) share: what each stage costs on a node type (``StageCosts``), a
placement (``Candidate``), what is asked of it (``Workload``) and what a run of it predicts
(``Result``). Their own module, so that the simulation's parts need not import it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StageCosts:
    """What each stage costs on one node type (``calibrate.py`` measures them). ``_cs``:
    core-seconds of CPU; per frame unless said otherwise."""

    decode_cs: float
    embed_cs: float
    # While another extractor embeds on the same node: torch's threads wait for cores
    # spinning, so a frame costs more CPU. 0: as ``embed_cs``.
    embed_cs_crowded: float = 0.0
    # torch's threads in an extractor (``Config.torch_threads``); 0: its share of the whole
    # cores the node's share allows, split among the node's extractors (``embed_threads``)
    embed_threads: int = 0
    embed_gpu_s: float = 0.0  # GPU seconds per frame; 0: the node embeds on its CPU
    text_cs: float = 0.0  # speech and screen text, where enabled
    aggregate_cs: float = 3e-5  # per row: hand-over, dedup, buffer (the aggregator's thread)
    encode_cs: tuple[float, ...] = (0.0, 1 / 120e3, 1 / 160e3)  # per row, per ladder level
    apply_cs: float = 4e-5  # per row, at a shard's primary and at each replica
    message_cs: float = 3e-4  # per batch at the shard: its fixed cost
    sync_s: float = 1e-3  # one log sync
    dedup_ratio: float = 1.0  # rows sent per frame embedded
    extractor_bytes: int = 2 << 30  # an extractor's memory (its models)
    query_cs: float = 0.0  # per text search, at an API replica: embedding the text
    search_cs: float = 0.0  # per search at one shard replica: its fixed part
    search_row_cs: float = 0.0  # per search at one shard replica, a row the shard holds

    def embed_cs_among(self, embedding: int) -> float:
        """Core-seconds to embed a frame while ``embedding`` extractors (this one counted)
        embed on the node."""
        return self.embed_cs_crowded if embedding > 1 and self.embed_cs_crowded else self.embed_cs

    @property
    def embed_cs_least(self) -> float:
        """The least a frame's embedding costs on a CPU, crowded or not (for bounds)."""
        return min(self.embed_cs, self.embed_cs_crowded or self.embed_cs)


@dataclass(frozen=True)
class Candidate:
    """A placement: extractors per node (in ``Cluster.nodes()`` order), the node of every
    replica of every shard (primary first), the fusion size limits, each node's codec
    floor (the ladder level its links start at and never step back below; () for none), and
    the API replicas that serve searches (on the head, where the media are)."""

    extractors: tuple[int, ...]
    shards: tuple[tuple[int, ...], ...]
    fusion_min_bytes: int = 64 << 10
    fusion_max_bytes: int = 8 << 20
    codec_floor: tuple[int, ...] = ()
    api_replicas: int = 1

    def floor(self, node: int) -> int:
        return self.codec_floor[node] if self.codec_floor else 0


@dataclass(frozen=True)
class Workload:
    """``videos`` of ``frames_per_video`` sampled frames each. ``steady``: videos without end,
    and the rate is the hand-overs' once the pipeline is full (each extractor has handed over
    ``simulate._WARM`` batches), over the next ``simulate._MEASURED`` batches per extractor (at
    least ``simulate._MEASURED_MIN``): what a long ingest sees, and what the search ranks. With
    ``video_bytes``, a video's worth of batches warms up and two videos' are measured, so that
    each extractor's transfers count. Hand-overs wait for room in the buffers, so in a full
    pipeline they run at the pace acknowledgements do; counted in batches, the rate is known
    to a batch in ``simulate._MEASURED_MIN``."""

    videos: int
    frames_per_video: int
    embed_batch: int = 16
    latency_target_s: float = 0.2
    steady: bool = False
    video_bytes: float = 0.0  # one video file, which lives on the head (see ``ship``)
    queries_per_s: float = 0.0  # text searches served meanwhile (``_queries.py``)
    index_rows: int = 0  # rows the shards hold between them when searched
    query_target_s: float = 0.0  # a search's p50 a placement must keep to rank first (0: none)


@dataclass
class Result:
    fps: float
    p50_s: float
    frames: int
    seconds: float
    messages: int = 0
    codec_rows: dict[str, float] = field(default_factory=dict)
    cpu_s: list[dict[str, float]] = field(default_factory=list)  # per node: by stage
    query_p50_s: float = 0.0  # a text search's, from arrival to the last shard's answer
