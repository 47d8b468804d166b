"""Routes: what a video shows and says: a frame as a thumbnail, the file itself (with the key,
or through a signed URL without it), and its transcript."""

import time
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, Response

from serve import _auth
from serve._errors import ApiError
from serve._openapi import VideoId, errors
from serve._ranges import video_response
from serve._replica import Serving
from serve._views import utc_time
from serve.schema import MediaUrl, Transcript
from vifusion.query.thumbnails import PastEnd
from vifusion.query.webvtt import webvtt

router = APIRouter()


@router.get(
    "/v1/videos/{video_id}/thumbnail",
    response_class=Response,
    responses={200: {"content": {"image/jpeg": {}}}, **errors(404)},
)
def thumbnail(
    replica: Serving, video_id: int = VideoId, t: float = Query(0.0, ge=0, le=1e7)
) -> Response:
    try:
        data = replica.service.thumbnail(video_id, t)
    except PastEnd as e:  # a 404, as for a video that is not there: no such picture
        raise ApiError(404, "past_end", str(e)) from None
    except ValueError as e:
        raise ApiError(422, "no_frame", str(e)) from None
    return Response(
        data, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=86400"}
    )


@router.get(
    "/v1/videos/{video_id}/media",
    response_class=FileResponse,
    responses={
        200: {"content": {"video/mp4": {}}},
        206: {"description": "a byte range"},
        **errors(404, 409),
    },
)
def media(replica: Serving, video_id: int = VideoId) -> FileResponse:
    """The video's file, byte ranges and all, once it has been decoded as a video (409
    ``not_playable`` before that, or for one that failed as no video)."""
    return video_response(*replica.service.open_media(video_id))


@router.post("/v1/videos/{video_id}/media-url", response_model=MediaUrl, responses=errors(404, 409))
def media_url(replica: Serving, request: Request, video_id: int = VideoId) -> dict:
    """A URL that plays the video without the key until it expires (``Config.media_url_ttl_s``):
    for a ``<video src>``, which cannot send ``Authorization``. It opens this video only, and
    only while the key that asked for it is live (revoked, it stops opening)."""
    replica.service.playable(video_id)  # a 404 or 409 now, not a URL that opens nothing
    now = time.time()
    url, exp = _auth.GATE.signer.url(video_id, now, _auth.caller(request).key_id)
    return {"url": url, "expires_at": utc_time(exp), "expires_in_s": exp - int(now)}


@router.get("/media/{video_id}", response_class=FileResponse, include_in_schema=False)
def signed_media(replica: Serving, video_id: int = VideoId) -> FileResponse:
    """The video of a signed URL (``media_url``), byte ranges and all; no key: the gate
    (serve/_front.py, before routing) answered 403 for a signature that is not this
    video's or has expired."""
    return video_response(*replica.service.open_media(video_id))


@router.get(
    "/v1/videos/{video_id}/transcript",
    response_model=Transcript,
    responses={200: {"content": {"text/vtt": {}}}, **errors(404)},
)
def transcript(
    replica: Serving,
    video_id: int = VideoId,
    kind: Literal["speech", "screen", "all"] = "speech",
    fmt: Literal["json", "vtt"] = Query("json", alias="format"),
    lang: Literal["en"] | None = Query(
        None, description="en: WebVTT of the English rendering of speech in other languages"
    ),
) -> Any:
    """What is said in a video (``kind=speech``), written on its screen (``screen``) or
    both (``all``), in time order: JSON (each segment's ``language`` and, where not English,
    its ``english`` rendering), or WebVTT subtitles with ``format=vtt`` (the words as said,
    or with ``lang=en`` their English rendering; the header names the language)."""
    rows = replica.service.transcript(video_id, kind)
    if fmt == "vtt":
        return Response(webvtt(rows, english=lang == "en"), media_type="text/vtt; charset=utf-8")
    return {
        "video_id": video_id,
        "segments": [
            {
                "kind": r.kind,
                "start_s": round(r.start_s, 3),
                "end_s": round(r.end_s, 3),
                "text": r.text,
                "language": r.language,
                "english": r.english,
            }
            for r in rows
        ],
    }
