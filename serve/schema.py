"""Request and response bodies of the REST API (``/v1``), as pydantic models.

These are the contract: programs outside the project rely on the field names.
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from vifusion.sources import MAX_TITLE_CHARS

MAX_VIDEO_ID = (1 << 39) - 1  # video_id << 24 must fit an int64 vector id


class ErrorBody(BaseModel):
    code: str
    message: str


class Error(BaseModel):
    error: ErrorBody


class VideoByUri(BaseModel):
    model_config = ConfigDict(extra="forbid")
    uri: str = Field(min_length=1, max_length=4096, description="file:///... (inside the ingest roots) or http(s)://...")
    title: str | None = Field(None, max_length=MAX_TITLE_CHARS, description="kept as given; none: the file's name")
    metadata: dict[str, Any] | None = None


class Accepted(BaseModel):
    video_id: int
    job_id: str
    status: Literal["queued"] = "queued"


class JobOut(BaseModel):
    job_id: str
    video_id: int
    status: Literal["queued", "decoding", "indexing", "ready", "failed"]
    progress: float = Field(ge=0, le=1)
    frames_indexed: int
    error: str | None


class VideoOut(BaseModel):
    video_id: int
    title: str
    metadata: dict[str, Any]
    status: str
    duration_s: float | None
    fps: float | None
    width: int | None
    height: int | None
    frames_indexed: int
    created_at: str = Field(description="ISO 8601, UTC")
    error: str | None = None


class VideoList(BaseModel):
    videos: list[VideoOut]
    next_cursor: str | None


class SearchRequest(BaseModel):
    """Exactly one query kind: ``text``, ``image_b64``, or ``video_id`` + ``start_s`` + ``end_s``."""

    model_config = ConfigDict(extra="forbid")
    text: str | None = Field(None, min_length=1, max_length=1000)
    image_b64: str | None = Field(None, min_length=1)
    video_id: int | None = Field(None, ge=1, le=MAX_VIDEO_ID)
    start_s: float | None = Field(None, ge=0, le=1e7)
    end_s: float | None = Field(None, gt=0, le=1e7)
    top_k: int = Field(10, ge=1, le=100)
    group_by: Literal["segment", "video", "frame"] = "segment"
    filter: dict[str, str | int | float | bool] | None = Field(None, max_length=16)
    min_score: float | None = Field(None, ge=-1e6, le=1e6)
    cursor: str | None = Field(None, max_length=200)


class Moment(BaseModel):
    video_id: int
    title: str | None
    start_s: float
    end_s: float
    score: float
    thumbnail_url: str


class SearchResults(BaseModel):
    results: list[Moment]
    next_cursor: str | None
    took_ms: float
    partial: bool = Field(False, description="some shards did not answer (restarting, say): their videos are missing")
    missing_shards: list[int] = Field(default_factory=list, description="the shards that did not answer")


class Health(BaseModel):
    status: str
    shards: int
    vectors: int
