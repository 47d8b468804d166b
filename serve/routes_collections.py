"""Routes: collections (vifusion/catalog/_collections.py): list them with their videos and
frames, and delete one with every video in it (vectors, media and thumbnails, through the
video delete: nothing of them stays in the shards or on disk)."""

from fastapi import APIRouter, Request
from fastapi import Path as PathParam
from pydantic import BaseModel, Field

from serve import _collections
from serve._openapi import errors
from serve._replica import Serving
from vifusion.catalog import check_collection
from vifusion.service import NotFound


class CollectionOut(BaseModel):
    name: str
    videos: int = Field(description="its videos, in any status")
    frames: int = Field(description="the frames its videos have indexed")


class CollectionList(BaseModel):
    collections: list[CollectionOut]


class CollectionDeleted(BaseModel):
    name: str
    deleted_video_ids: list[int] = Field(
        description="every video deleted with it; a job still running for one deletes what it "
        "indexed when it ends"
    )


router = APIRouter()


@router.get("/v1/collections", response_model=CollectionList)
def collections(replica: Serving, request: Request) -> dict:
    """Every collection that holds a video (those the key reaches), by name."""
    reached = _collections.searched(request, None)
    found = replica.service.catalog.collections(reached)
    return {
        "collections": [{"name": c.name, "videos": c.videos, "frames": c.frames} for c in found]
    }


@router.delete(
    "/v1/collections/{name}",
    response_model=CollectionDeleted,
    responses=errors(403, 404, 507),
)
def delete_collection(
    replica: Serving, request: Request, name: str = PathParam(max_length=64)
) -> dict:
    """Delete a collection: every video in it, its vectors, stored media and thumbnails
    (admin keys). 404 for a collection that holds no video, or that the key does not reach."""
    try:
        check_collection(name)
    except ValueError:
        raise NotFound(f"no collection {name!r}") from None
    if not _collections.reaches(request, name):
        raise NotFound(f"no collection {name!r}")
    deleted = replica.service.delete_collection(name)
    if not deleted:
        raise NotFound(f"no collection {name!r}")
    return {"name": name, "deleted_video_ids": deleted}
