"""The one configuration object, built once and handed down to every stage.

Sources, later ones winning: defaults, a JSON file, ``VIFUSION_<FIELD>`` environment
variables, explicit overrides (CLI flags). No stage reads the environment itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from vifusion._config_extract import ExtractFields
from vifusion._config_fields import FusionFields, HookFields, IndexFields
from vifusion._cores import usable_cores
from vifusion._limits import ordered

ENV_PREFIX = "VIFUSION_"


class _Where(BaseModel):
    """Where the data, the cluster and the catalog are (the first fields of ``Config``)."""

    data_dir: Path = Field(Path("vifusion-data"), description="catalog, indexes, thumbnails")
    model_cache: Path | None = Field(
        None,
        description="where models made from the installed wheels are kept (the text model's "
        "ONNX export, Whisper base joined, class-name vectors), shared by every data dir; "
        "None: ~/.cache/vifusion/models, or DATA_DIR/models where that cannot be written",
    )
    api_key: str | None = Field(
        None,
        description="REST API key, at least 32 characters; None: generated once into DATA_DIR/api_key",
    )
    ray_address: str | None = Field(
        None, description="None: start a local Ray; 'auto' or host:port: join"
    )
    catalog_url: str | None = Field(
        None,
        description="where the catalog lives: None, the SQLite file DATA_DIR/catalog.db (one machine); "
        "postgresql://user@host:port/db, a PostgreSQL server every node reaches (a cluster)",
    )
    shared_actors: bool = Field(
        False,
        description="the shard replicas and the ingest pool are detached named actors that every "
        "API replica on this data dir shares and that outlive any one of them (a cluster); "
        "False: the service that starts them stops them on close (one machine)",
    )
    catalog_pool_size: int = Field(
        8,
        gt=0,
        description="connections a process keeps open to a PostgreSQL catalog "
        "at most (threads beyond it wait for one)",
    )


class Config(HookFields, IndexFields, FusionFields, ExtractFields, _Where):
    """Every setting, one flat model: ``_Where``'s fields, the stages' (declared by stage in
    ``_config_fields.py``), then serve/'s below."""

    model_config = {"frozen": True, "extra": "forbid"}

    # serve/: ingest limits and guards
    ingest_roots: tuple[Path, ...] = Field(
        (), description="folders file:// uris may name; empty: file:// refused"
    )
    allow_private_urls: bool = Field(
        False, description="let http(s) ingest reach loopback, link-local and private addresses"
    )
    max_upload_bytes: int = Field(2 << 30, gt=0, description="largest upload or download accepted")
    fetch_deadline_s: float = Field(
        3600.0,
        gt=0,
        description="a URL fetch (redirects included) still going after this fails its job",
    )
    fetch_min_rate_bps: int = Field(
        16 << 10,
        ge=0,
        description="a URL fetch slower than this (bytes/s) over a "
        "fetch_rate_window_s, the first one aside, fails its job; 0: no minimum",
    )
    fetch_rate_window_s: float = Field(
        30.0,
        gt=0,
        description="the span a fetch's rate is measured over, and the "
        "longest it waits for the next bytes",
    )
    max_metadata_bytes: int = Field(
        16 << 10, gt=0, description="largest metadata object (as JSON) per video"
    )
    max_json_bytes: int = Field(
        32 << 20, gt=0, description="largest JSON request body (an image_b64 query)"
    )
    max_metadata_depth: int = Field(
        8,
        gt=0,
        le=64,
        description='deepest nesting of objects and arrays in a video\'s metadata ({"a": 1} is 1)',
    )
    max_metadata_keys: int = Field(
        256, gt=0, description="most keys in a video's metadata, counted in every object it holds"
    )
    max_query_clip_bytes: int = Field(
        64 << 20, gt=0, description="largest clip a search may upload"
    )
    max_query_clip_s: float = Field(60.0, gt=0, description="longest clip a search may upload")
    query_clip_decode_budget_s: float = Field(
        10.0,
        gt=0,
        description="decoding a search's clip that takes longer "
        "is stopped, and the search refused (a clip too costly to decode)",
    )
    thumbnail_cache_bytes: int = Field(
        256 << 20,
        ge=0,
        description="most bytes of thumbnails kept on disk; the least recently used go first",
    )
    rate_limit_rps: float = Field(
        100.0,
        gt=0,
        description="/v1 requests per second per client (API key and address), sustained; "
        "thumbnails and media have their own budget",
    )
    rate_limit_burst: int = Field(200, gt=0, description="/v1 requests per client allowed at once")
    rate_limit_media_rps: float = Field(
        100.0, gt=0, description="thumbnail and media requests per second per client, sustained"
    )
    rate_limit_media_burst: int = Field(
        500,
        gt=0,
        description="thumbnail and media requests per client at once (a page of 50 results fetches 50)",
    )
    media_url_ttl_s: int = Field(
        3600,
        ge=10,
        le=7 * 86400,
        description="how long a signed media URL (POST /v1/videos/{id}/media-url) opens "
        "its video: the player fetches byte ranges of it as it plays and seeks; the web page asks for a new one "
        "when a URL runs out mid-film",
    )
    api_replicas: int = Field(
        1,
        gt=0,
        description="API replicas at least (autoscaled up to twice as many); more than 1 needs "
        "shared_actors, so that no replica owns the shards and the ingest pool the others use",
    )
    serve_tuned: bool = Field(
        True,
        description="run Ray Serve in its throughput settings: HAProxy ingress (C) instead of the Python proxy, "
        "and the app on the replica's own event loop; for a Ray that `vifusion serve` starts (on a cluster, set "
        "RAY_SERVE_ENABLE_HA_PROXY=1 and RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD=0 where the nodes start)",
    )
    # The HAProxy ingress's other ports (serve_tuned, a Ray that `vifusion serve` starts): two
    # services on one machine need different ones (serve/_ingress.py).
    ingress_stats_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="HAProxy's statistics page, http://127.0.0.1:PORT/stats (loopback only, no "
        "password); 0: off",
    )
    ingress_metrics_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="HAProxy's Prometheus exporter, http://127.0.0.1:PORT/metrics (loopback only); "
        "0: off (the service's own /metrics is on its port)",
    )
    ingress_fallback_port: int = Field(
        8500,
        gt=0,
        le=65535,
        description="Ray Serve's own proxy, on the service's host: HAProxy's fallback while no "
        "API replica is up",
    )

    # HTTPS at the ingress: Serve's own proxy (uvicorn) holds the certificate; HAProxy, as
    # Serve configures it, speaks plain HTTP, so HTTPS turns serve_tuned's ingress off.
    https: bool = Field(
        False,
        description="serve the API and the page over HTTPS only; without tls_certfile, a "
        "self-signed certificate for this host is made once in DATA_DIR/tls",
    )
    tls_certfile: Path | None = Field(
        None,
        description="your certificate for HTTPS (PEM, the chain after it); implies https",
    )
    tls_keyfile: Path | None = Field(None, description="the key of tls_certfile (PEM)")

    # Not a setting (never read from the environment): the placement plan in force, resolved
    # once where the runtime starts (``runtime.with_applied_plan``) and handed down with the
    # config, so that no stage reads DATA_DIR/plan.json itself; a plan applied while the
    # service runs is handed down the same way (``Runtime.use_plan``).
    plan: dict[str, Any] | None = Field(
        None, description="the applied plan, as checked (placement.applied_plan); None: unplanned"
    )

    @field_validator("data_dir", "model_cache", "tls_certfile", "tls_keyfile")
    @classmethod
    def _expand(cls, v: Path | None) -> Path | None:
        return None if v is None else Path(v).expanduser()

    @field_validator("ingest_roots", mode="before")
    @classmethod
    def _roots(cls, v: Any) -> Any:
        # From the environment: VIFUSION_INGEST_ROOTS=/srv/videos:/mnt/nas (like PATH).
        if isinstance(v, str):
            return tuple(Path(p).expanduser() for p in v.split(os.pathsep) if p)
        return v

    @model_validator(mode="after")
    def _pairs_in_order(self) -> Config:
        """Limits that work as a pair must not contradict each other: the error names both."""
        ordered(
            "fusion_min_bytes", self.fusion_min_bytes, "fusion_max_bytes", self.fusion_max_bytes
        )
        # A full reading comes only with a reading, and a still picture is read only every
        # ocr_still_interval_s: a shorter full interval could not hold on a still picture.
        ordered(
            "ocr_still_interval_s",
            self.ocr_still_interval_s,
            "ocr_full_interval_s",
            self.ocr_full_interval_s,
        )
        if self.ocr_gate_side:  # the gate is a cheap look at a smaller picture than a reading's
            ordered(
                "ocr_gate_side",
                self.ocr_gate_side,
                "ocr_frame_side",
                self.ocr_frame_side,
                strict=True,
            )
        if self.shard_ack_replicas is not None:  # a write can wait only for followers there are
            ordered(
                "shard_ack_replicas",
                self.shard_ack_replicas,
                "shard_replicas - 1",
                self.shard_replicas - 1,
            )
        if self.api_replicas > 1 and not self.shared_actors:
            raise ValueError(
                "api_replicas > 1 needs shared_actors: true (the shards and the ingest pool "
                "must outlive any one replica)"
            )
        # The read timeout is one rate window: a longer one would outlast the deadline.
        ordered(
            "fetch_rate_window_s",
            self.fetch_rate_window_s,
            "fetch_deadline_s",
            self.fetch_deadline_s,
        )
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("tls_certfile and tls_keyfile go together: give both or neither")
        return self

    @property
    def serves_https(self) -> bool:
        return self.https or self.tls_certfile is not None

    def updated(self, changes: Mapping[str, Any]) -> Config:
        """A copy with ``changes``, checked as a new Config is (``model_copy`` checks nothing:
        a live setting of -1, or a pair inverted, would slip through it)."""
        return type(self).model_validate({**self.model_dump(), **changes})

    @property
    def sample_interval_s(self) -> float:
        return 1.0 / self.sample_fps

    @property
    def max_segment_gap_s(self) -> float:
        return self.segment_gap_s or 1.5 * self.sample_interval_s

    @property
    def threads(self) -> int:
        """Threads for torch / FAISS / OCR / speech where the per-stage setting is 0 (Ray sets
        OMP to 1): one per whole core this process may use (its CPU affinity and cgroup quota,
        see ``usable_cores``), not per machine core, whose extra threads would only spin. Read
        when asked, so an actor counts the cores of its own node and cgroup."""
        return usable_cores()

    @classmethod
    def load(
        cls,
        file: Path | None = None,
        env: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> Config:
        values: dict[str, Any] = {}
        if file is not None:
            values.update(json.loads(Path(file).read_text()))
        env = os.environ if env is None else env
        for name in cls.model_fields:
            if name == "plan":  # resolved from plan.json where the runtime starts, not set
                continue
            key = ENV_PREFIX + name.upper()
            if key in env:
                values[name] = env[key]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
