"""Request and response bodies of the REST API (``/v1``), as pydantic models.

These are the contract: programs outside the project rely on the field names.
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from vifusion.ingest.sources import MAX_TITLE_CHARS
from vifusion.query.ranking import ALIASES, MODALITIES

MAX_VIDEO_ID = (1 << 39) - 1  # video_id << 24 must fit an int64 vector id
COLLECTION = r"^[a-z0-9][a-z0-9_-]{0,63}$"  # vifusion.catalog.check_collection's rule
CollectionName = Annotated[str, Field(pattern=COLLECTION)]
Modality = Literal["visual", "speech", "screen"]  # vifusion.query.ranking.MODALITIES


class ErrorBody(BaseModel):
    code: str
    message: str


class Error(BaseModel):
    error: ErrorBody


class VideoByUri(BaseModel):
    model_config = ConfigDict(extra="forbid")
    uri: str = Field(
        min_length=1,
        max_length=4096,
        description="file:///... (inside the ingest roots) or http(s)://...",
    )
    title: str | None = Field(
        None, max_length=MAX_TITLE_CHARS, description="kept as given; none: the file's name"
    )
    metadata: dict[str, Any] | None = None
    collection: CollectionName = Field(
        "default", description="the collection it goes in (1-64 of a-z, 0-9, _ and -)"
    )


class CollectionForm(BaseModel):
    """An upload's ``collection`` form field."""

    collection: CollectionName = "default"


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
    stage: Literal["fetching", "probing", "frames", "speech", "saving"] | None = Field(
        None,
        description="what the job does now: fetching its URL, probing the file, decoding and embedding "
        "frames (reading their on-screen text), transcribing speech, saving (the index acknowledging every row); "
        "where it failed, when failed; null when queued or ready",
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="what went wrong without failing the job, one "
        "line each: a video without audio, with silence, music only or a broken audio "
        "stream is indexed all the same, without speech, and says so here",
    )


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
    language: str | None = Field(
        None,
        description="the language spoken (ISO 639-1; where it switches, the one it starts in); "
        "null: nothing said, or not known",
    )
    error: str | None = None
    job_id: str | None = Field(None, description="its latest job (a retry makes a new one)")
    stage: Literal["fetching", "probing", "frames", "speech", "saving"] | None = Field(
        None, description="what its latest job does now, or where it failed (as JobOut.stage)"
    )
    progress: float = Field(0.0, ge=0, le=1, description="its latest job's progress")
    collection: str = Field("default", description="the collection it belongs to")


class MediaUrl(BaseModel):
    url: str = Field(
        description="/media/{video_id}?exp=...&sig=...: opens the video without the key (byte "
        "ranges too) until expires_at; put it in a <video src>"
    )
    expires_at: str = Field(description="ISO 8601, UTC")
    expires_in_s: int = Field(
        description="seconds from now until it expires (a client's clock may be off)"
    )


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
    languages: list[Annotated[str, Field(pattern=r"^[a-z]{2,3}$")]] | None = Field(
        None,
        max_length=16,
        description="only videos in which one of these languages (ISO 639-1, as Whisper "
        "names them: en, es, fr, ...) is spoken",
    )
    collections: list[CollectionName] | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="only videos in these collections; a list, or one comma-separated string "
        "(as a multipart field sends it). Default: every collection the key reaches",
    )
    min_score: float | None = Field(None, ge=-1e6, le=1e6)
    min_relative_score: float | None = Field(
        None,
        ge=0,
        le=1,
        description="drop moments scoring under this fraction of the search's best moment (the "
        "best of the whole ranking, so every page agrees); 0: keep them all. Default: the service's "
        "min_relative_score setting",
    )
    cursor: str | None = Field(None, max_length=200)
    modalities: list[Modality] = Field(
        list(MODALITIES),
        min_length=1,
        max_length=len(MODALITIES),
        description="what a text query searches: visual (what is seen), speech (what is said), screen (what is "
        "written on screen; 'text' names it too); a list, or one comma-separated string (as a multipart field sends it). Default: all. "
        "An image or clip query searches what is seen: its modalities must include visual",
    )

    fusion: Literal["rrf", "calibrated", "evidence"] | None = Field(  # ranking.BLENDS
        None,
        description="how a text query over several modalities blends their ranked lists: "
        "evidence (each hit's probability of being relevant, by its score), calibrated (each "
        "score scaled to 0-1), rrf (ranks only). Default: the service's",
    )

    @field_validator("collections", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [c.strip() for c in value.split(",") if c.strip()]
        return value

    @field_validator("modalities", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [m.strip() for m in value.split(",") if m.strip()]
        if not isinstance(value, list):
            return value
        return [
            ALIASES.get(m, m) if isinstance(m, str) else m for m in value
        ]  # the rest fails validation


class Moment(BaseModel):
    video_id: int
    title: str | None
    start_s: float
    end_s: float
    score: float = Field(
        description="higher is better, comparable within one search. A text query over several "
        "modalities sums what each found, each scaled to 0-1 (a cosine between 'unrelated' and "
        "'as close as a query gets', the share of the query's words held); one over visual alone, "
        "an image or a clip gives the cosine"
    )
    thumbnail_url: str
    matched: list[Modality] = Field(
        description="the modalities that found this moment, the strongest first"
    )
    snippet: str | None = Field(
        description="the words spoken or written in this moment; null where only the "
        "picture matched"
    )
    highlights: list[tuple[int, int]] = Field(
        description="[start, end) character offsets of the query's words in "
        "the snippet (near spellings too), in order"
    )
    snippet_english: str | None = Field(
        None,
        description="the snippet's English rendering, where it was said in another language "
        "(an English query finds it by these words); null: none",
    )
    highlights_english: list[tuple[int, int]] = Field(
        [], description="as highlights, in snippet_english"
    )
    language: str | None = Field(
        None,
        description="the language the snippet was said in (ISO 639-1, as Whisper detected it); "
        "null: on-screen text, only the picture matched, or not known",
    )


class TranscriptSegment(BaseModel):
    kind: Literal["speech", "screen"] = Field(description="speech: said; screen: written on screen")
    start_s: float
    end_s: float
    text: str
    language: str | None = Field(
        None, description="the spoken language (ISO 639-1) of a speech segment; null: not known"
    )
    english: str | None = Field(
        None, description="a non-English speech segment's English rendering; null: none"
    )


class Transcript(BaseModel):
    video_id: int
    segments: list[TranscriptSegment] = Field(description="in time order")


class SearchResults(BaseModel):
    results: list[Moment]
    next_cursor: str | None
    took_ms: float
    partial: bool = Field(
        False, description="some shards did not answer (restarting, say): their videos are missing"
    )
    missing_shards: list[int] = Field(
        default_factory=list, description="the shards that did not answer"
    )


class Health(BaseModel):
    status: str
    shards: int
    vectors: int
