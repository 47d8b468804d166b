"""Routes: adding videos (an upload or a URI), their ingest jobs, the library (list, one
video, delete, retry a failed one)."""

from fastapi import APIRouter, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import Response

from serve import _bodies, _collections, _cursors, _views
from serve._errors import ApiError
from serve._openapi import UPLOAD_BODY, VideoId, errors
from serve._replica import Serving
from serve.schema import Accepted, CollectionForm, JobOut, VideoByUri, VideoList, VideoOut

router = APIRouter()
_COLLECTION = Query(
    None, max_length=64, description="only videos in this collection (repeat for several)"
)


@router.post(
    "/v1/videos",
    status_code=202,
    response_model=Accepted,
    openapi_extra=UPLOAD_BODY,
    responses=errors(400, 403, 404, 413, 415, 507),
)
async def add_video(replica: Serving, request: Request) -> dict:
    cfg, service = replica.cfg, replica.service
    if _bodies.kind(request) == "form":
        form = await _bodies.form(
            request,
            cfg.max_upload_bytes + (1 << 20),
            cfg.max_metadata_bytes,
            service.spool,
            "the upload was not stored",
        )
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise ApiError(422, "invalid_request", "multipart upload needs a 'file' part")
        title = form.get("title")
        if title is not None and not isinstance(title, str):
            raise ApiError(422, "invalid_request", "title must be a form field, not a file")
        metadata = _bodies.json_field(form.get("metadata"), "metadata")
        given = {"collection": form["collection"]} if "collection" in form else {}
        collection = _bodies.model(CollectionForm, given).collection
        _collections.ingested(request, collection)
        done = await replica.blocking(
            service.ingest_upload, upload.file, upload.filename, title, metadata, collection
        )
    else:
        body = await _bodies.json_body(request, cfg.max_metadata_bytes + 8192)
        req = _bodies.model(VideoByUri, body)
        _collections.ingested(request, req.collection)
        done = await replica.blocking(
            service.ingest_uri, req.uri, req.title, req.metadata, req.collection
        )
    return {"video_id": done.video_id, "job_id": done.job_id, "status": "queued"}


@router.get("/v1/jobs/{job_id}", response_model=JobOut, responses=errors(404))
def job(replica: Serving, job_id: str = PathParam(max_length=64)) -> dict:
    return _views.job_out(replica.service.job(job_id))


@router.get("/v1/videos", response_model=VideoList, responses=errors(400))
def videos(
    replica: Serving,
    request: Request,
    limit: int = Query(50, ge=1, le=500),
    cursor: str | None = Query(None, max_length=32),
    collection: list[str] | None = _COLLECTION,
) -> dict:
    """A page of videos in id order: those of ``collection`` (repeatable) when given, else of
    every collection the key reaches."""
    reached = _collections.searched(request, collection)
    page, last = replica.service.videos(limit, _cursors.videos_after(cursor), reached)
    jobs = replica.service.catalog.latest_jobs([v.id for v in page])
    return {
        "videos": [_views.video_out(v, jobs.get(v.id)) for v in page],
        "next_cursor": None if last is None else str(last),
    }


@router.get("/v1/videos/{video_id}", response_model=VideoOut, responses=errors(404))
def video(replica: Serving, video_id: int = VideoId) -> dict:
    video = replica.service.video(video_id)  # a 404 for one that is not there
    return _views.video_out(video, replica.service.catalog.latest_jobs([video_id]).get(video_id))


@router.delete(
    "/v1/videos/{video_id}",
    status_code=204,
    response_class=Response,
    responses=errors(404, 507),
)
def delete(replica: Serving, video_id: int = VideoId) -> Response:
    replica.service.delete(video_id)
    return Response(status_code=204)


@router.post(
    "/v1/videos/{video_id}/retry",
    status_code=202,
    response_model=Accepted,
    responses=errors(404, 409, 410, 507),
)
def retry(replica: Serving, video_id: int = VideoId) -> dict:
    """Index a failed video again: a new job (poll ``/v1/jobs/{job_id}``). 409 ``not_failed``
    for a video that has not failed; 410 ``source_gone`` when its file is no longer there."""
    job_id = replica.service.retry(video_id)
    return {"video_id": video_id, "job_id": job_id, "status": "queued"}
