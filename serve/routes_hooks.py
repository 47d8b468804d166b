"""Routes: webhooks, for admin keys only (serve/_auth.py ROUTE_SCOPES): register one (its
secret shown once), list them with how their deliveries stand, remove one. What is sent and
how it is signed: vifusion/hooks/. Only a key that reaches every collection manages them (a
hook for all collections hears of every video)."""

from typing import Literal

from fastapi import APIRouter, Request
from fastapi import Path as PathParam
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from serve import _bodies, _collections
from serve._errors import ApiError
from serve._openapi import errors, json_body
from serve._replica import Serving
from serve._views import utc_time
from vifusion.catalog import Hook
from vifusion.hooks import events
from vifusion.ingest.sources import SourceError

EventName = Literal["job.ready", "job.failed", "video.deleted"]


class HookRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        max_length=events.MAX_URL_CHARS,
        description="where events are POSTed: http(s), a public address unless the service "
        "allows private ones (allow_private_urls)",
    )
    events: list[EventName] | None = Field(
        None, min_length=1, description="the events sent; none: all of them"
    )
    collection: str | None = Field(
        None, description="only events about videos in this collection; none: every one"
    )


class LastDelivery(BaseModel):
    at: str = Field(description="when the last attempt was made")
    state: Literal["pending", "delivered", "failed"]
    http_status: int | None = Field(description="the receiver's answer; none: no answer")
    error: str | None = Field(description="why the attempt failed; none: delivered")
    attempts: int = Field(description="attempts that delivery has taken")


class HookOut(BaseModel):
    id: str
    url: str
    events: list[str]
    collection: str | None
    created_at: str
    pending: int = Field(description="deliveries not yet delivered nor given up")
    last_delivery: LastDelivery | None = Field(description="none: no attempt yet")


class HookCreated(HookOut):
    secret: str = Field(
        description="signs every delivery (X-ViFusion-Signature): shown this once, never listed"
    )


class HookList(BaseModel):
    hooks: list[HookOut]


def hook_out(h: Hook) -> dict:
    last = None
    if h.last_at is not None:
        last = {
            "at": utc_time(h.last_at),
            "state": h.last_state,
            "http_status": h.last_status,
            "error": h.last_error,
            "attempts": h.last_attempts,
        }
    return {
        "id": h.id,
        "url": h.url,
        "events": list(h.events),
        "collection": h.collection,
        "created_at": utc_time(h.created_at),
        "pending": h.pending,
        "last_delivery": last,
    }


router = APIRouter()


@router.post(
    "/v1/webhooks",
    status_code=201,
    response_model=HookCreated,
    openapi_extra=json_body(HookRequest),
    responses=errors(400, 403, 413),
)
async def create_hook(replica: Serving, request: Request) -> dict:
    """Register a URL for ``job.ready``, ``job.failed`` and ``video.deleted`` events (or some
    of them), for one collection or all. The response holds the hook's secret; no later call
    shows it. Refused (403 ``forbidden_address``) where the URL's host is not a public address
    and the service does not allow private ones, as for URL ingest."""
    _collections.reaches_all(request, "manage webhooks")
    req = _bodies.model(HookRequest, await _bodies.json_body(request, 8192))
    try:
        hook = await replica.blocking(
            events.register,
            replica.service.catalog,
            replica.cfg,
            req.url,
            req.events,
            req.collection,
        )
    except SourceError:
        raise  # the URL refused: its own status (403 forbidden_address, 400 invalid_uri)
    except ValueError as e:  # a collection's name out of its rules
        raise ApiError(422, "invalid_request", str(e)) from None
    return hook_out(hook) | {"secret": hook.secret}


@router.get("/v1/webhooks", response_model=HookList, responses=errors(403))
def list_hooks(replica: Serving, request: Request) -> dict:
    """Every hook, with its deliveries pending and its last attempt (never a secret)."""
    _collections.reaches_all(request, "manage webhooks")
    return {"hooks": [hook_out(h) for h in replica.service.catalog.hooks()]}


@router.delete(
    "/v1/webhooks/{hook_id}", status_code=204, response_class=Response, responses=errors(403, 404)
)
def delete_hook(
    replica: Serving, request: Request, hook_id: str = PathParam(max_length=64)
) -> Response:
    """Remove a hook: nothing more is sent to it, its pending deliveries included."""
    _collections.reaches_all(request, "manage webhooks")
    if not replica.service.catalog.delete_hook(hook_id):
        raise ApiError(404, "not_found", f"no webhook {hook_id!r}")
    return Response(status_code=204)
