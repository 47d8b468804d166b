"""Routes: the library embedded again with the configured visual model while the service
answers (``vifusion/ingest/live_reindex.py``), for admin keys that reach every collection."""

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from serve import _bodies, _collections
from serve._errors import ApiError
from serve._openapi import errors, json_body
from serve._replica import Serving
from serve._views import utc_time
from vifusion.ingest.live_reindex import ReindexBusy


class ReindexRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    visual_model: str | None = Field(
        None,
        max_length=4096,
        description="the model the caller expects the reindex to embed with: refused (409) "
        "where the service is configured with another; none: the configured one",
    )


class ReindexOut(BaseModel):
    state: str = Field(
        description="idle, embedding, switching, ready (searches use the new vectors) or failed"
    )
    model: str = Field(description="the visual model the last reindex embedded with")
    index_model: str = Field(description="the visual model searches use now")
    configured_model: str = Field(description="the one a new reindex embeds with")
    videos_done: int = Field(description="videos embedded in the current round")
    videos_total: int = Field(description="videos of the current round")
    videos: int
    frames: int
    skipped: dict[str, str] = Field(description="video id -> why it was left out")
    error: str | None
    started_at: str | None
    finished_at: str | None


def reindex_out(state: dict) -> dict:
    times = {k: utc_time(state[k]) if state[k] else None for k in ("started_at", "finished_at")}
    skipped = {str(k): v for k, v in state["skipped"].items()}
    return state | times | {"skipped": skipped}


router = APIRouter()


@router.post(
    "/v1/reindex",
    status_code=202,
    response_model=ReindexOut,
    openapi_extra=json_body(ReindexRequest),
    responses=errors(400, 403, 409),
)
async def start_reindex(replica: Serving, request: Request) -> dict:
    """Embed every ready video again with the service's configured ``visual_model``
    (`VIFUSION_VISUAL_MODEL`): searches answer from the vectors in use meanwhile and ingest
    goes on; then the service switches to the new vectors at once. Follow it with
    ``GET /v1/reindex``. Refused (409) while one runs, or where the model's weights are
    missing. The model is the service's setting, never a path a client sends."""
    _collections.reaches_all(request, "reindex the library")
    body = await _bodies.json_body(request, 8192, optional=True)
    wanted = _bodies.model(ReindexRequest, body).visual_model
    configured = replica.cfg.visual_model
    if wanted is not None and wanted != configured:
        raise ApiError(
            409,
            "model_not_configured",
            f"the service is configured with visual_model {configured!r}, not {wanted!r}: "
            "set VIFUSION_VISUAL_MODEL (or visual_model in its config) and restart it first",
        )
    try:
        return reindex_out(await replica.blocking(replica.service.reindex))
    except ReindexBusy as e:
        raise ApiError(409, "reindex_running", str(e)) from None
    except (ValueError, FileNotFoundError) as e:
        raise ApiError(409, "model_unavailable", str(e)) from None


@router.get("/v1/reindex", response_model=ReindexOut, responses=errors(403))
async def reindex_state(replica: Serving, request: Request) -> dict:
    """Where the last reindex stands, and the models in use and configured."""
    _collections.reaches_all(request, "reindex the library")
    return reindex_out(await replica.blocking(replica.service.reindex_state))
