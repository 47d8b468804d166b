"""Routes: API keys, for admin keys only (serve/_auth.py ROUTE_SCOPES): make one (shown
once), list them (never a key), revoke one (every replica refuses it within a second)."""

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
from serve.schema import CollectionName
from vifusion.catalog import ApiKey

_DAY_S = 86400.0


class KeyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: Literal["search", "ingest", "admin"]
    name: str = Field("", max_length=200, description="what the key is for, as listed")
    expires_in_days: float | None = Field(
        None, gt=0, le=36500, description="the key stops opening after this; none: never"
    )
    collections: list[CollectionName] | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="the only collections it reaches (searches, videos, ingest); none: every "
        "one. A key limited to collections makes keys limited to some of its own",
    )


class KeyOut(BaseModel):
    id: str
    name: str
    scope: str
    created_at: str
    expires_at: str | None
    revoked_at: str | None
    collections: list[str] | None = None


class KeyCreated(KeyOut):
    key: str = Field(description="the key itself: shown this once, never stored")


class KeyList(BaseModel):
    keys: list[KeyOut]


def key_out(k: ApiKey) -> dict:
    return {
        "id": k.id,
        "name": k.name,
        "scope": k.scope,
        "created_at": utc_time(k.created_at),
        "expires_at": None if k.expires_at is None else utc_time(k.expires_at),
        "revoked_at": None if k.revoked_at is None else utc_time(k.revoked_at),
        "collections": None if k.collections is None else list(k.collections),
    }


router = APIRouter()


@router.post(
    "/v1/keys",
    status_code=201,
    response_model=KeyCreated,
    openapi_extra=json_body(KeyRequest),
    responses=errors(400, 403, 413),
)
async def create_key(replica: Serving, request: Request) -> dict:
    """A new key of a scope: ``search`` (search and read), ``ingest`` (also add videos and
    read jobs) or ``admin`` (everything). The response holds the key; no later call shows it."""
    req = _bodies.model(KeyRequest, await _bodies.json_body(request, 4096))
    expires_in_s = None if req.expires_in_days is None else req.expires_in_days * _DAY_S
    # A key limited to collections makes keys within them only (none given: its own).
    limited = _collections.searched(request, req.collections, "make a key for")
    record, key = await replica.blocking(
        replica.service.catalog.create_key, req.scope, req.name, expires_in_s, limited
    )
    return key_out(record) | {"key": key}


@router.get("/v1/keys", response_model=KeyList, responses=errors(403))
def list_keys(replica: Serving, request: Request) -> dict:
    """Every stored key, revoked and expired ones too (the bootstrap key is not stored)."""
    _collections.reaches_all(request, "list keys")
    return {"keys": [key_out(k) for k in replica.service.catalog.api_keys()]}


@router.delete(
    "/v1/keys/{key_id}", status_code=204, response_class=Response, responses=errors(403, 404)
)
def revoke_key(
    replica: Serving, request: Request, key_id: str = PathParam(max_length=64)
) -> Response:
    """Revoke a key: every replica refuses it, and the media URLs it made, within a second."""
    _collections.reaches_all(request, "revoke keys")
    if replica.service.catalog.revoke_key(key_id) is None:
        raise ApiError(404, "not_found", f"no key {key_id!r}")
    return Response(status_code=204)
