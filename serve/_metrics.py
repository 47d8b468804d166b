"""Prometheus figures of one replica: requests and latencies as they happen, the rest
(ingest and the placement plan's re-plans, transfers, each link's statistics, shard sizes)
read from the service when scraped.

Use ``METRICS`` through this module (``_metrics.METRICS``): Serve pickles the deployment
class by value, and a name imported into a route module could be copied with it, not shared.
"""

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "vifusion_http_requests", "HTTP requests", ["route", "method", "status"], registry=r
        )
        self.latency = Histogram(
            "vifusion_http_request_seconds",
            "HTTP request latency",
            ["route"],
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.search_latency = Histogram(
            "vifusion_search_seconds",
            "search latency inside the service",
            ["kind"],
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.vectors = Gauge(
            "vifusion_shard_vectors", "vectors held", ["shard", "space"], registry=r
        )
        self.shard_videos = Gauge("vifusion_shard_videos", "videos held", ["shard"], registry=r)
        self.shard_index = Gauge(
            "vifusion_shard_index",
            "1 for the FAISS index type a shard's space uses now",
            ["shard", "space", "factory"],
            registry=r,
        )
        self.shard_log_seq = Gauge(
            "vifusion_shard_log_seq", "last write-ahead log record applied", ["shard"], registry=r
        )
        self.shard_snapshot_seq = Gauge(
            "vifusion_shard_snapshot_seq", "last log record in the snapshot", ["shard"], registry=r
        )
        self.videos = Gauge("vifusion_videos", "videos in the catalog", ["status"], registry=r)
        self.jobs = Gauge(
            "vifusion_ingest_jobs", "ingest jobs finished since start", ["outcome"], registry=r
        )
        self.frames = Gauge("vifusion_ingest_frames", "frames indexed since start", registry=r)
        self.fps = Gauge(
            "vifusion_ingest_frames_per_second",
            "frames indexed per second of ingest work",
            registry=r,
        )
        self.replans = Gauge(
            "vifusion_replans_total",
            "placement plans made again since the ingest pool started, each for a link whose "
            "capacity changed for good (DATA_DIR/plan.json)",
            registry=r,
        )
        self.plan_fps = Gauge(
            "vifusion_plan_predicted_frames_per_second",
            "ingest frames/s the placement plan in force predicts; 0 without one",
            registry=r,
        )
        self.extractors = Gauge(
            "vifusion_extractors",
            "extractor actors the ingest pool runs (0 until its first job starts them)",
            registry=r,
        )
        self.batches = Gauge("vifusion_fusion_batches", "fused batches sent to shards", registry=r)
        self.fused_frames = Gauge(
            "vifusion_fusion_frames", "frames sent in fused batches", registry=r
        )
        self.wire = Gauge(
            "vifusion_codec_bytes", "batch bytes sent on the wire, by codec", ["codec"], registry=r
        )
        self.batch_frames = Gauge(
            "vifusion_fusion_frames_per_batch", "mean frames per fused batch", registry=r
        )
        self.deduped = Gauge(
            "vifusion_fusion_frames_merged",
            "frames merged into a near-duplicate neighbour (temporal dedup) or still waiting",
            registry=r,
        )
        self.latency_p50 = Gauge(
            "vifusion_fusion_latency_p50_seconds",
            "extraction -> acknowledged by the shard, median of recent frames (worst node)",
            registry=r,
        )
        self.latency_p99 = Gauge(
            "vifusion_fusion_latency_p99_seconds", "the same, 99th percentile", registry=r
        )
        # One series per link: a node's aggregator and the shard it sends to (vifusion.comm.link).
        self.links = {
            key: Gauge(f"vifusion_link_{name}", doc, ["node", "shard"], registry=r)
            for key, name, doc in (
                row.split(maxsplit=2) for row in _LINK_GAUGES.strip().splitlines()
            )
        }
        self.link_codec = Gauge(
            "vifusion_link_codec",
            "1 for the codec a link sends with now "
            "(fp32 exact; fp16, int8, sparse, pq while congested)",
            ["node", "shard", "codec"],
            registry=r,
        )

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def render(self, stats: dict[str, Any]) -> bytes:
        for s in stats["shards"]:
            for space, n in s["vectors"].items():
                self.vectors.labels(str(s["shard"]), space).set(n)
            self.shard_videos.labels(str(s["shard"])).set(s["videos"])
            self.shard_log_seq.labels(str(s["shard"])).set(s["seq"])
            self.shard_snapshot_seq.labels(str(s["shard"])).set(s["snapshot_seq"])
        self.shard_index.clear()  # a rebuilt space changes its factory label
        for s in stats["shards"]:
            for space, factory in s["index"].items():
                self.shard_index.labels(str(s["shard"]), space, factory).set(1)
        for status, n in stats["videos"].items():
            self.videos.labels(status).set(n)
        ingest = stats["ingest"]
        self.jobs.labels("ready").set(ingest.jobs_ready)
        self.jobs.labels("failed").set(ingest.jobs_failed)
        self.frames.set(ingest.frames_indexed)
        self.fps.set(ingest.frames_per_s)
        self.replans.set(ingest.replans)
        self.plan_fps.set(ingest.plan_predicted_fps)
        self.extractors.set(ingest.extractors)
        batches = sum(a.get("batches", 0) for a in stats["fusion"])
        frames = sum(a.get("rows_out", 0) for a in stats["fusion"])
        self.batches.set(batches)
        self.fused_frames.set(frames)
        self.deduped.set(sum(a.get("rows_in", 0) for a in stats["fusion"]) - frames)
        for codec in {c for a in stats["fusion"] for c in a["codec_bytes"]} | {"fp32"}:
            self.wire.labels(codec).set(
                sum(a["codec_bytes"].get(codec, 0) for a in stats["fusion"])
            )
        self.batch_frames.set(frames / batches if batches else 0)
        self.latency_p50.set(max((a["latency_p50_s"] for a in stats["fusion"]), default=0))
        self.latency_p99.set(max((a["latency_p99_s"] for a in stats["fusion"]), default=0))
        self._render_links(stats["fusion"])
        return generate_latest(self.registry)

    def _render_links(self, fusion: list[dict[str, Any]]) -> None:
        # A link whose aggregator is gone (its node left) stops being reported.
        for gauge in (*self.links.values(), self.link_codec):
            gauge.clear()
        for a in fusion:
            for shard, link in a["links"].items():
                labels = (a["node"], str(shard))
                for key, gauge in self.links.items():
                    gauge.labels(*labels).set(link[key])
                self.link_codec.labels(*labels, link["codec"]).set(1)


# One gauge per line: its key in Aggregator.stats()["links"][shard], its name after
# vifusion_link_, its help.
_LINK_GAUGES = """
delivery_rate     delivery_rate_bytes_per_second  bytes/s acknowledged, windowed max over a second
capacity          capacity_bytes_per_second       bytes/s the link carried when clear (windowed max)
min_rtt_s         min_rtt_seconds                 network round trip without queues
queueing_delay_s  queueing_delay_seconds          round trip beyond min RTT and the bytes' own time on the link
backlog_age_s     backlog_age_seconds             how long the oldest frame waiting to be sent has waited
in_flight         in_flight_messages              messages sent and not yet acknowledged
receiver_share    receiver_share                  share of recent round trips the shard spent busy (near 1: the shard, not the link, holds data back)
per_message_s     per_message_seconds             fixed cost of one message, which the batch size amortises
level             codec_level                     codec ladder level now: 0 fp32 (exact), 1 fp16, 2 int8, 3 sparse, 4 pq
batch_bytes       batch_bytes                     fusion batch size B the link's statistics call for
window            window_messages                 messages allowed in flight (from the bandwidth-delay product)
by_stream         by_stream                       1 while the link's batches go on the shard stream (TCP to the shard), 0 by actor call
"""

METRICS = Metrics()  # one per replica process
