"""The HTTP service: a Ray Serve deployment with a FastAPI ingress over ``vifusion.service``.

Handlers parse, authenticate, rate-limit and format; the work is the library's. Every
``/v1`` route needs ``Authorization: Bearer <key>``; ``/healthz``, ``/metrics`` and the web
page (``/``) do not, and ``/media/{id}`` needs a signed URL's signature instead (serve/_signed.py). Errors are ``{"error": {"code", "message"}}``.

Replicas accept videos and answer searches; the jobs run in the data dir's one ingest pool
(vifusion/ingest/pool.py). On one machine a replica owns the data dir (the writer lock); with
``shared_actors`` any number of replicas share it, the shard replicas and the pool.

No `from __future__ import annotations` here: FastAPI must see the request models' real
classes through Serve's ingress wrapper, or it takes a body for a query parameter.
"""

import asyncio
import base64
import binascii
import contextlib
import datetime
import functools
import io
import json
import logging
import math
import os
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from tempfile import SpooledTemporaryFile
from typing import Any, Literal

import numpy as np
from fastapi import FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, HTMLResponse, Response
from pydantic import ValidationError
from ray import serve
from ray.serve import Application
from starlette._utils import get_route_path
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.responses import MalformedRangeHeader, RangeNotSatisfiable

from serve import _auth, _docs, _errors, _ingress, _metrics, _tls
from serve._errors import ApiError
from serve.schema import (
    MAX_VIDEO_ID,
    Accepted,
    Error,
    Health,
    JobOut,
    MediaUrl,
    SearchRequest,
    SearchResults,
    Transcript,
    VideoByUri,
    VideoList,
    VideoOut,
)
from vifusion._files import fd_path, storage_writes
from vifusion.cluster import running as _running
from vifusion.cluster.actors import HEAD_RESOURCE
from vifusion.cluster.placement import API_ONGOING, applied_plan, planned_api_replicas
from vifusion.config import Config
from vifusion.ingest.sources import MAX_TITLE_CHARS
from vifusion.query.ranking import snippet_fields
from vifusion.query.searcher import ClipRefused
from vifusion.query.thumbnails import PastEnd
from vifusion.query.webvtt import webvtt
from vifusion.runtime import tune_ray

STATIC = Path(__file__).parent / "static"
# Ray Serve's throughput settings (Config.serve_tuned), measured by benchmarks/serve_load.py on
# 2 cores: HAProxy ingress and no separate user-code loop, 84 searches/s at 4 clients against
# 56 with Serve's defaults. The handlers never block the loop (blocking work goes to a pool).
SERVE_TUNED = {"RAY_SERVE_ENABLE_HA_PROXY": "1", "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0"}
APP_NAME = "vifusion"  # the Serve application, as `vifusion serve` and deploy/serve.yaml name it
ROUTE_PREFIX = "/"
SERVE_LOGGING = {"log_level": "WARNING"}  # no per-request access lines: /metrics has the figures
_PAGES = {"app.js": "text/javascript", "style.css": "text/css"}
_MAX_IMAGE_PIXELS = 40_000_000
_CLIP_WORKERS = 2  # clip searches decoding at once; more wait their turn

api = FastAPI(
    title="ViFusion",
    version="1",
    description="Index video and find moments in it. Every /v1 route needs `Authorization: Bearer <key>`.",
    responses={401: {"model": Error}, 422: {"model": Error}, 429: {"model": Error}},
    docs_url=None,  # /docs and /redoc come from serve/_docs.py: no CDN
    redoc_url=None,
)
_errors.install(api)
_docs.install(api)

VideoId = PathParam(ge=1, le=MAX_VIDEO_ID)
_UPLOAD_BODY = {
    "requestBody": {
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "title": {"type": "string", "maxLength": MAX_TITLE_CHARS},
                        "metadata": {"type": "string", "description": "a JSON object"},
                    },
                }
            },
            "application/json": {"schema": VideoByUri.model_json_schema()},
        },
        "required": True,
    }
}
_SEARCH_BODY = {
    "requestBody": {
        "content": {
            "application/json": {"schema": SearchRequest.model_json_schema()},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "image": {"type": "string", "format": "binary"},
                        "clip": {"type": "string", "format": "binary"},
                        "text": {"type": "string", "minLength": 1, "maxLength": 1000},
                        "video_id": {"type": "integer", "minimum": 1},
                        "start_s": {"type": "number", "minimum": 0},
                        "end_s": {"type": "number", "exclusiveMinimum": 0},
                        "top_k": {"type": "integer", "minimum": 1, "maximum": 100},
                        "group_by": {"type": "string", "enum": ["segment", "video", "frame"]},
                        "filter": {"type": "string", "description": "a JSON object"},
                        "min_score": {"type": "number"},
                        "min_relative_score": {"type": "number", "minimum": 0, "maximum": 1},
                        "cursor": {"type": "string"},
                        "modalities": {
                            "type": "string",
                            "description": "comma-separated, of visual, speech, screen",
                        },
                    },
                }
            },
        },
        "required": True,
    }
}


# On every response: scripts, styles, images and media from this origin only (the key is in
# this origin's storage), no framing, no type sniffing, no referrer. Inline styles are allowed
# for Swagger UI and ReDoc (/docs, /redoc); they cannot run script.
_SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        b"img-src 'self' data: blob:; media-src 'self' blob:; worker-src 'self' blob:; connect-src 'self'; "
        b"object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


class _Front:
    """The outermost layer of the app: gates ``/v1`` on the key and the rate limit, and
    ``/media`` on the URL's signature and the rate limit, before routing; adds the security
    headers, and counts and times every request. Plain ASGI rather than ``@app.middleware``:
    on two cores the per-request cost of that wrapper shows.

    The gate looks at the path the router matches (``get_route_path``: without the
    ``root_path`` that a route prefix or a Mount puts in front), so a prefix cannot hide /v1."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = 500

        async def sending(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), *_SECURITY_HEADERS]
            await send(message)

        try:
            path = get_route_path(scope)
            if path == "/v1" or path.startswith("/v1/"):
                auth = next(
                    (v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), ""
                )
                denied = _auth.GATE.check(auth, _auth.client_address(scope), path)
                if denied is not None:
                    return await denied(scope, receive, sending)
            elif path.startswith("/media/"):  # a signed URL: no key; its signature is checked here
                denied = _auth.GATE.check_signed(
                    path, scope["query_string"], _auth.client_address(scope)
                )
                if denied is not None:
                    return await denied(scope, receive, sending)
            await self.app(scope, receive, sending)
        finally:
            route = getattr(
                scope.get("route"), "path", "other"
            )  # the route template, set by the router
            _metrics.METRICS.observe(route, scope["method"], status, time.perf_counter() - t0)


api.add_middleware(_Front)


# -- request bodies ----------------------------------------------------------------------


class _TooLarge(Exception):
    pass


def _limit_body(request: Request, limit: int) -> Request:
    """The request, reading at most ``limit`` body bytes (413 past that, whatever the
    Content-Length said)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "too_large", f"request body is {declared} bytes; the limit is {limit}")
    seen = 0
    receive = request.receive

    async def limited():
        nonlocal seen
        message = await receive()
        seen += len(message.get("body", b""))
        if seen > limit:
            raise _TooLarge
        return message

    return Request(request.scope, limited)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _parse_json(raw: str | bytes, what: str) -> Any:
    """``raw`` as JSON, or a 400 that says why. Python's reader takes more than JSON, and what
    it takes the service cannot use: NaN and Infinity (SQLite's JSON functions refuse the
    metadata that holds them), and it stops itself at integers of over 4300 digits and at
    nesting deeper than its recursion limit."""
    try:
        return json.loads(raw, parse_constant=_not_json)
    except RecursionError:
        raise ApiError(400, "malformed_json", f"{what} is nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, NaN, an integer too long to read
        why = "an integer has over 4300 digits" if "integer string conversion" in str(e) else str(e)
        raise ApiError(400, "malformed_json", f"{what} is not valid JSON: {why}") from None


async def _json_body(request: Request, limit: int) -> Any:
    try:
        raw = await _limit_body(request, limit).body()
    except _TooLarge:
        raise ApiError(413, "too_large", f"request body over the {limit}-byte limit") from None
    return _parse_json(raw, "body")


class _SpoolingParser(MultiPartParser):
    """Starlette's multipart parser with each file part spooled (past 1 MiB kept in memory)
    in ``spool`` instead of the system temp dir, for which Starlette has no setting."""

    def __init__(self, *args, spool: Path, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._spool = spool

    def on_headers_finished(self) -> None:
        super().on_headers_finished()
        upload = self._current_part.file
        if upload is not None:  # a file part, given an empty in-memory spool just now
            upload.file = SpooledTemporaryFile(max_size=self.spool_max_size, dir=self._spool)
            self._files_to_close_on_error[-1] = upload.file


async def _form(request: Request, limit: int, max_field: int, spool: Path, outcome: str):
    """The multipart form of ``request``: ``limit`` bytes at most (413), ``max_field`` a
    field; its files spooled in ``spool``, the data dir's ``tmp`` (``Service.spool``), where
    a full disk is a StorageError (507) saying ``outcome``."""
    body = _limit_body(request, limit)
    try:
        async with contextlib.aclosing(body.stream()) as stream:
            parser = _SpoolingParser(
                body.headers,
                stream,
                spool=spool,
                max_files=2,
                max_fields=16,
                max_part_size=max_field,
            )
            with storage_writes(spool.parent, outcome):
                return await parser.parse()
    except _TooLarge:
        raise ApiError(413, "too_large", f"upload over the {limit}-byte limit") from None
    except MultiPartException as e:
        message = e.message
        if "maximum size" in message:
            raise ApiError(413, "too_large", message) from None
        raise ApiError(400, "malformed_form", message) from None


def _kind(request: Request) -> str:
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype == "application/json" or ctype.endswith("+json"):
        return "json"
    if ctype == "multipart/form-data":
        return "form"
    raise ApiError(415, "unsupported_media_type", "send application/json or multipart/form-data")


def _json_field(value: Any, name: str) -> Any:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ApiError(422, "invalid_request", f"{name} must be a form field, not a file")
    parsed = _parse_json(value, name)
    if not isinstance(parsed, dict):
        raise ApiError(422, "invalid_request", f"{name} must be a JSON object")
    return parsed


def _model(cls, data: Any):
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        msg = "; ".join(
            f"{'.'.join(map(str, err['loc'])) or 'body'}: {err['msg']}" for err in e.errors()[:5]
        )
        raise ApiError(422, "invalid_request", msg) from None


def _image(data: bytes) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.width * im.height > _MAX_IMAGE_PIXELS:
                raise ApiError(
                    413,
                    "too_large",
                    f"image is {im.width}x{im.height}; the limit is {_MAX_IMAGE_PIXELS} pixels",
                )
            return np.asarray(im.convert("RGB"))
    except UnidentifiedImageError:
        raise ApiError(
            422, "invalid_image", "not a readable image (send JPEG, PNG, WebP, GIF, BMP or TIFF)"
        ) from None
    except Image.DecompressionBombError:
        raise ApiError(
            413, "too_large", f"image is over the {_MAX_IMAGE_PIXELS}-pixel limit"
        ) from None
    except (OSError, ValueError) as e:  # truncated or corrupt data in a known format
        raise ApiError(
            422, "invalid_image", f"image cannot be decoded: {type(e).__name__}"
        ) from None


def _cursor(offset: int | None) -> str | None:
    return (
        None
        if offset is None
        else base64.urlsafe_b64encode(json.dumps({"o": offset}).encode()).decode()
    )


def _offset(cursor: str | None) -> int:
    if not cursor:
        return 0
    try:
        offset = json.loads(base64.urlsafe_b64decode(cursor.encode()))["o"]
        if type(offset) is int and offset >= 0:  # not a bool
            return offset
    except (ValueError, KeyError, TypeError, binascii.Error):
        pass
    raise ApiError(400, "invalid_cursor", "cursor is not one this service gave out")


def _video_out(v, job=None) -> dict:
    """A video as the API gives it, with where its latest job ``job`` stands (None: none)."""
    created = (
        datetime.datetime.fromtimestamp(v.created_at, datetime.UTC)
        .isoformat()
        .replace("+00:00", "Z")
    )
    return VideoOut(
        video_id=v.id,
        title=v.title,
        metadata=v.metadata,
        status=v.status,
        duration_s=v.duration_s,
        fps=v.fps,
        width=v.width,
        height=v.height,
        frames_indexed=v.frames_indexed,
        created_at=created,
        error=v.error,
        job_id=job and job.id,
        stage=job and job.stage,
        progress=round(job.progress, 4) if job else 0.0,
    ).model_dump()


def moments(service, page) -> list[dict]:
    """A search page's results as the API returns them (titles from the catalog)."""
    videos = service.catalog.get_videos([m.video_id for m in page.results])
    return [
        {
            "video_id": m.video_id,
            "title": videos[m.video_id].title if m.video_id in videos else None,
            "start_s": round(m.start_s, 3),
            "end_s": round(m.end_s, 3),
            "score": round(m.score, 4),
            "thumbnail_url": f"/v1/videos/{m.video_id}/thumbnail?t={_thumbnail_t(m, videos.get(m.video_id)):.2f}",
            "matched": m.matched,
            **snippet_fields(m.snippet),
        }
        for m in page.results
    ]


def _thumbnail_t(moment, video) -> float:
    """The middle of a moment, inside its video (a clip's moment may run past the end, and
    a thumbnail past the end is a 404), rounded down to the hundredth the URL gives."""
    t = (moment.start_s + moment.end_s) / 2
    if video is not None and video.duration_s:
        t = min(t, video.duration_s)
    return math.floor(t * 100) / 100


def _video_type(path: Path) -> str:
    return {
        ".webm": "video/webm",
        ".mkv": "video/x-matroska",
        ".mov": "video/quicktime",
        ".avi": "video/x-msvideo",
        ".ogv": "video/ogg",
        ".gif": "image/gif",
    }.get(path.suffix.lower(), "video/mp4")


class _DescriptorResponse(FileResponse):
    """A FileResponse (byte ranges and all) of an open descriptor, not of a name: Starlette
    opens ``fd_path`` of it, the file that was checked whatever its name points at now. The
    descriptor is closed when the response ends, sent whole or not."""

    def __init__(self, fd: int, media_type: str) -> None:
        super().__init__(fd_path(fd), media_type=media_type, stat_result=os.fstat(fd))
        self._fd = fd

    async def __call__(self, scope, receive, send) -> None:
        try:
            refused = self._refused_range(scope)
            await (refused or super().__call__)(scope, receive, send)
        finally:
            os.close(self._fd)

    def _refused_range(self, scope) -> Response | None:
        """The error, as this API writes errors, for a Range header Starlette would refuse
        (it answers those in plain text): 400 malformed, 416 past the end. Parsed by
        Starlette's own reader, so what passes here is what it serves."""
        headers = dict(scope["headers"])
        http_range = headers.get(b"range")
        if_range = headers.get(b"if-range")
        if http_range is None or (
            if_range is not None and not self._should_use_range(if_range.decode("latin-1"))
        ):
            return None  # the whole file (an If-Range that does not match asks for that)
        size = self.stat_result.st_size
        try:
            self._parse_range_header(http_range.decode("latin-1"), size)
        except MalformedRangeHeader as e:
            return _errors.error_response(
                400, "bad_range", f"Range header not understood: {e.content}"
            )
        except RangeNotSatisfiable:
            return _errors.error_response(
                416,
                "range_not_satisfiable",
                f"the video has {size} bytes",
                {"Content-Range": f"bytes */{size}"},
            )
        return None


# -- the deployment ----------------------------------------------------------------------


@serve.deployment(
    num_replicas=1, max_ongoing_requests=API_ONGOING, ray_actor_options={"num_cpus": 0}
)
@serve.ingress(api)
class ViFusionApp:
    def __init__(self, cfg: Config) -> None:
        import torch

        from vifusion.service import Service

        torch.set_num_threads(cfg.query_threads)
        self.cfg = cfg
        _auth.GATE.configure(_auth.api_key(cfg), cfg)
        # A replica replacing this one (a redeploy) waits for it to let go of the data dir.
        self.service = Service(cfg, wait_s=120)
        # Blocking work runs here, not on Serve's event loop: a fixed pool, so threads (and
        # their SQLite connections) are reused instead of made per request.
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="vifusion-api")
        # Clip searches decode video (seconds each, within their caps): on a pool of their own,
        # so a burst of them queues there instead of holding every thread the others need.
        self._clip_pool = ThreadPoolExecutor(
            max_workers=_CLIP_WORKERS, thread_name_prefix="vifusion-clip"
        )
        with contextlib.redirect_stdout(
            io.StringIO()
        ):  # load the query models now, not on the first search
            self.service.searcher  # noqa: B018

    def reconfigure(self, user_config: dict) -> None:
        """Live settings (``serve deploy`` with a new ``user_config``): the rate limits
        (``rate_limit_rps``, ``rate_limit_burst``, ``rate_limit_media_rps``, ``rate_limit_media_burst``),
        checked as at start: a value out of range, or a misspelt name, fails the deploy."""
        _auth.GATE.set_limits(self.cfg.updated(user_config))

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.service.close()

    # -- pages and probes ------------------------------------------------------------

    @api.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page(self) -> HTMLResponse:
        return HTMLResponse((STATIC / "index.html").read_text())

    @api.get("/static/{name}", include_in_schema=False)
    def static(self, name: str) -> Response:
        if name not in _PAGES:
            raise ApiError(404, "not_found", f"no static file {name!r}")
        return Response((STATIC / name).read_bytes(), media_type=_PAGES[name])

    @api.get("/healthz", response_model=Health)
    def healthz(self) -> dict:
        return self.service.health()

    @api.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
    def metrics(self) -> Response:
        return Response(
            _metrics.METRICS.render(self.service.stats()), media_type="text/plain; version=0.0.4"
        )

    # -- videos ----------------------------------------------------------------------

    @api.post(
        "/v1/videos",
        status_code=202,
        response_model=Accepted,
        openapi_extra=_UPLOAD_BODY,
        responses={
            400: {"model": Error},
            403: {"model": Error},
            404: {"model": Error},
            413: {"model": Error},
            415: {"model": Error},
            507: {"model": Error},
        },
    )
    async def add_video(self, request: Request) -> dict:
        if _kind(request) == "form":
            form = await _form(
                request,
                self.cfg.max_upload_bytes + (1 << 20),
                self.cfg.max_metadata_bytes,
                self.service.spool,
                "the upload was not stored",
            )
            upload = form.get("file")
            if upload is None or isinstance(upload, str):
                raise ApiError(422, "invalid_request", "multipart upload needs a 'file' part")
            title = form.get("title")
            if title is not None and not isinstance(title, str):
                raise ApiError(422, "invalid_request", "title must be a form field, not a file")
            metadata = _json_field(form.get("metadata"), "metadata")
            done = await self._blocking(
                self.service.ingest_upload, upload.file, upload.filename, title, metadata
            )
        else:
            req = _model(VideoByUri, await _json_body(request, self.cfg.max_metadata_bytes + 8192))
            done = await self._blocking(self.service.ingest_uri, req.uri, req.title, req.metadata)
        return {"video_id": done.video_id, "job_id": done.job_id, "status": "queued"}

    @api.get("/v1/jobs/{job_id}", response_model=JobOut, responses={404: {"model": Error}})
    def job(self, job_id: str = PathParam(max_length=64)) -> dict:
        j = self.service.job(job_id)
        return {
            "job_id": j.id,
            "video_id": j.video_id,
            "status": j.status,
            "progress": round(j.progress, 4),
            "frames_indexed": j.frames_indexed,
            "error": j.error,
            "stage": j.stage,
            "warnings": list(j.warnings),
        }

    @api.get("/v1/videos", response_model=VideoList, responses={400: {"model": Error}})
    def videos(
        self, limit: int = Query(50, ge=1, le=500), cursor: str | None = Query(None, max_length=32)
    ) -> dict:
        after = 0
        if cursor:
            if not (cursor.isascii() and cursor.isdigit()) or int(cursor) > MAX_VIDEO_ID:
                raise ApiError(400, "invalid_cursor", "cursor is not one this service gave out")
            after = int(cursor)
        page, last = self.service.videos(limit, after)
        jobs = self.service.catalog.latest_jobs([v.id for v in page])
        return {
            "videos": [_video_out(v, jobs.get(v.id)) for v in page],
            "next_cursor": None if last is None else str(last),
        }

    @api.get("/v1/videos/{video_id}", response_model=VideoOut, responses={404: {"model": Error}})
    def video(self, video_id: int = VideoId) -> dict:
        video = self.service.video(video_id)
        return _video_out(video, self.service.catalog.latest_jobs([video_id]).get(video_id))

    @api.delete(
        "/v1/videos/{video_id}",
        status_code=204,
        response_class=Response,
        responses={404: {"model": Error}, 507: {"model": Error}},
    )
    def delete(self, video_id: int = VideoId) -> Response:
        self.service.delete(video_id)
        return Response(status_code=204)

    @api.post(
        "/v1/videos/{video_id}/retry",
        status_code=202,
        response_model=Accepted,
        responses={
            404: {"model": Error},
            409: {"model": Error},
            410: {"model": Error},
            507: {"model": Error},
        },
    )
    def retry(self, video_id: int = VideoId) -> dict:
        """Index a failed video again: a new job (poll ``/v1/jobs/{job_id}``). 409 ``not_failed``
        for a video that has not failed; 410 ``source_gone`` when its file is no longer there."""
        job_id = self.service.retry(video_id)
        return {"video_id": video_id, "job_id": job_id, "status": "queued"}

    @api.get(
        "/v1/videos/{video_id}/thumbnail",
        response_class=Response,
        responses={200: {"content": {"image/jpeg": {}}}, 404: {"model": Error}},
    )
    def thumbnail(self, video_id: int = VideoId, t: float = Query(0.0, ge=0, le=1e7)) -> Response:
        try:
            data = self.service.thumbnail(video_id, t)
        except PastEnd as e:  # a 404, as for a video that is not there: no such picture
            raise ApiError(404, "past_end", str(e)) from None
        except ValueError as e:
            raise ApiError(422, "no_frame", str(e)) from None
        return Response(
            data, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=86400"}
        )

    @api.get(
        "/v1/videos/{video_id}/media",
        response_class=FileResponse,
        responses={
            200: {"content": {"video/mp4": {}}},
            206: {"description": "a byte range"},
            404: {"model": Error},
            409: {"model": Error},
        },
    )
    def media(self, video_id: int = VideoId) -> FileResponse:
        """The video's file, byte ranges and all, once it has been decoded as a video (409
        ``not_playable`` before that, or for one that failed as no video)."""
        fd, path = self.service.open_media(video_id)
        return _DescriptorResponse(fd, media_type=_video_type(path))

    @api.post(
        "/v1/videos/{video_id}/media-url",
        response_model=MediaUrl,
        responses={404: {"model": Error}, 409: {"model": Error}},
    )
    def media_url(self, video_id: int = VideoId) -> dict:
        """A URL that plays the video without the key until it expires (``Config.media_url_ttl_s``):
        for a ``<video src>``, which cannot send ``Authorization``. It opens this video only."""
        self.service.playable(video_id)  # a 404 or 409 now, not a URL that opens nothing
        now = time.time()
        url, exp = _auth.GATE.signer.url(video_id, now)
        expires = (
            datetime.datetime.fromtimestamp(exp, datetime.UTC).isoformat().replace("+00:00", "Z")
        )
        return {"url": url, "expires_at": expires, "expires_in_s": exp - int(now)}

    @api.get("/media/{video_id}", response_class=FileResponse, include_in_schema=False)
    def signed_media(self, video_id: int = VideoId) -> FileResponse:
        """The video of a signed URL (``media_url``), byte ranges and all; no key: the gate
        (``_Front``, before routing) answered 403 for a signature that is not this video's
        or has expired."""
        fd, path = self.service.open_media(video_id)
        return _DescriptorResponse(fd, media_type=_video_type(path))

    @api.get(
        "/v1/videos/{video_id}/transcript",
        response_model=Transcript,
        responses={200: {"content": {"text/vtt": {}}}, 404: {"model": Error}},
    )
    def transcript(
        self,
        video_id: int = VideoId,
        kind: Literal["speech", "screen", "all"] = "speech",
        fmt: Literal["json", "vtt"] = Query("json", alias="format"),
    ) -> Any:
        """What is said in a video (``kind=speech``), written on its screen (``screen``) or
        both (``all``), in time order: JSON, or WebVTT subtitles with ``format=vtt``."""
        rows = self.service.transcript(video_id, kind)
        if fmt == "vtt":
            return Response(webvtt(rows), media_type="text/vtt; charset=utf-8")
        return {
            "video_id": video_id,
            "segments": [
                {
                    "kind": r.kind,
                    "start_s": round(r.start_s, 3),
                    "end_s": round(r.end_s, 3),
                    "text": r.text,
                }
                for r in rows
            ],
        }

    # -- search ----------------------------------------------------------------------

    @api.post(
        "/v1/search",
        response_model=SearchResults,
        openapi_extra=_SEARCH_BODY,
        responses={
            400: {"model": Error},
            404: {"model": Error},
            413: {"model": Error},
            415: {"model": Error},
        },
    )
    async def search(self, request: Request) -> dict:
        t0 = time.perf_counter()
        clip_file = None
        if _kind(request) == "json":
            req = _model(SearchRequest, await _json_body(request, self.cfg.max_json_bytes))
            query: dict[str, Any] = {}
            if req.image_b64 is not None:
                try:
                    query["image"] = await self._blocking(
                        _image, base64.b64decode(req.image_b64, validate=True)
                    )
                except (binascii.Error, ValueError) as e:
                    raise ApiError(422, "invalid_image", f"image_b64 is not base64: {e}") from None
        else:
            limit = max(self.cfg.max_query_clip_bytes, self.cfg.max_json_bytes) + (
                1 << 20
            )  # a clip, or an image
            form = await _form(
                request, limit, 1 << 16, self.service.spool, "the search was not run"
            )
            files = {k: form[k] for k in ("image", "clip") if k in form}
            if any(isinstance(f, str) for f in files.values()):
                raise ApiError(422, "invalid_request", "image and clip must be files")
            fields = {k: v for k, v in form.items() if k not in files}
            if "filter" in fields:
                fields["filter"] = _json_field(fields["filter"], "filter")
            req = _model(SearchRequest, fields)
            query = {}
            if "image" in files:
                query["image"] = await self._blocking(_image, await files["image"].read())
            if "clip" in files:
                clip_file = files["clip"]
                if clip_file.size is not None and clip_file.size > self.cfg.max_query_clip_bytes:
                    raise ApiError(
                        413,
                        "too_large",
                        f"the clip is {clip_file.size} bytes; the limit is "
                        f"{self.cfg.max_query_clip_bytes}",
                    )
        kinds = [
            k
            for k, given in (
                ("text", req.text is not None),
                ("image", "image" in query),
                ("clip", clip_file is not None),
                ("video_id", req.video_id is not None),
            )
            if given
        ]
        if len(kinds) != 1:
            raise ApiError(
                422,
                "invalid_query",
                "give exactly one of text, image_b64 (or image), clip, or "
                f"video_id + start_s + end_s; got {', '.join(kinds) or 'none'}",
            )
        if req.text is not None:
            query["text"] = req.text
        if req.video_id is not None:
            if req.start_s is None or req.end_s is None or req.end_s <= req.start_s:
                raise ApiError(
                    422, "invalid_query", "a clip of an indexed video needs start_s < end_s"
                )
            query["stored_clip"] = (req.video_id, req.start_s, req.end_s)
        options = dict(
            top_k=req.top_k,
            group_by=req.group_by,
            filter=req.filter,
            min_score=req.min_score,
            min_relative_score=req.min_relative_score,
            offset=_offset(req.cursor),
            modalities=req.modalities,
        )
        pool = self._clip_pool if clip_file is not None else self._pool
        body = await asyncio.get_running_loop().run_in_executor(
            pool, functools.partial(self._search, query, clip_file, options, kinds[0])
        )
        body["took_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        return body

    async def _blocking(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(
            self._pool, functools.partial(fn, *args)
        )

    def _search(self, query: dict, clip_file, options: dict, kind: str) -> dict:
        """The search and its response body (but ``took_ms``), on a worker thread."""
        from vifusion.extract.decode import DecodeError

        t0 = time.perf_counter()
        try:
            if clip_file is not None:
                # The spooled clip itself, decoded through its descriptor: no copy. A clip
                # still in memory is put on disk first, in the data dir's spool.
                with storage_writes(self.cfg.data_dir, "the search was not run"):
                    fd = clip_file.file.fileno()
                page = self.service.search(clip=Path(fd_path(fd)), **options)
            else:
                page = self.service.search(**query, **options)
        except DecodeError as e:
            raise ApiError(422, "invalid_clip", str(e)) from None
        except ClipRefused as e:
            raise ApiError(e.status, e.code, str(e)) from None
        except ValueError as e:  # NotFound (an unknown video) goes on to its 404 handler
            raise ApiError(422, "invalid_query", str(e)) from None
        finally:
            _metrics.METRICS.search_latency.labels(kind).observe(time.perf_counter() - t0)
        return {
            "results": moments(self.service, page),
            "next_cursor": _cursor(page.next_offset),
            "partial": bool(page.missing_shards),
            "missing_shards": list(page.missing_shards),
        }


def deploy(cfg: Config, host: str, port: int) -> Path | None:
    """Start Serve's proxy on host:port and deploy the app (Ray must be up). Returns the
    certificate it serves HTTPS with (``cfg.serves_https``), None for plain HTTP."""
    http: dict[str, Any] = {"host": host, "port": port}
    certfile = None
    if cfg.serves_https:
        certfile, keyfile = _tls.ingress_pair(cfg)
        http |= {"ssl_certfile": str(certfile), "ssl_keyfile": str(keyfile)}
    # One proxy, on the head, where the replicas run; a proxy per node costs each node memory.
    serve.start(proxy_location="HeadOnly", http_options=http, logging_config=SERVE_LOGGING)
    serve.run(
        replicas(cfg).bind(cfg),
        name=APP_NAME,
        route_prefix=ROUTE_PREFIX,
        logging_config=SERVE_LOGGING,
    )
    return certfile


def replicas(cfg: Config) -> Any:
    """The deployment as ``cfg`` asks for it: one replica, or more (``api_replicas``, or an
    applied plan's count), autoscaled up to twice that under load (they share the shards and
    the ingest pool: ``shared_actors``). Every replica runs on the head node: uploads,
    thumbnails and the media they serve live on its disk (the nodes share none)."""
    options: dict[str, Any] = {
        "ray_actor_options": {"num_cpus": 0, "resources": {HEAD_RESOURCE: 0.001}}
    }
    least = planned_api_replicas(applied_plan(cfg), cfg.api_replicas, cfg.shared_actors)
    if least > 1:
        options |= {
            "num_replicas": "auto",
            "autoscaling_config": {
                "min_replicas": least,
                "max_replicas": 2 * least,
                "target_ongoing_requests": 8,
            },
        }
    return ViFusionApp.options(**options)


def build(args: dict[str, Any]) -> Application:
    """The app for `serve deploy` (``import_path: serve.app:build``; see deploy/serve.yaml).

    ``args`` are Config fields (``data_dir``, ``num_shards``, ...) plus an optional
    ``config_file`` (JSON); ``VIFUSION_*`` variables of the app's runtime_env apply as for the
    CLI, ``args`` winning. An unknown field fails the deploy (Config forbids extras)."""
    args = dict(args)
    file = args.pop("config_file", None)
    cfg = Config.load(file=Path(file) if file else None, **args)
    return replicas(cfg).bind(cfg)


def tune_serve(cfg: Config) -> Path:
    """Set, for a Ray this process is about to start (its workers inherit them), Serve's
    throughput settings (``SERVE_TUNED``; values set already win) and those of its HAProxy
    ingress (serve/_ingress.py: its files in a private dir, its own pages on loopback or off,
    HAProxy killed with the service). Returns that dir, to remove once that Ray has stopped."""
    for name, value in SERVE_TUNED.items():
        os.environ.setdefault(name, value)
    run_dir = _ingress.private_dir()
    os.environ.update(_ingress.env(cfg, run_dir))
    return run_dir


def run(cfg: Config, host: str, port: int) -> int:
    """Start the service on a local Ray (or ``cfg.ray_address``) and serve until Ctrl-C."""
    ingress_dir = None
    if cfg.ray_address is None:  # read by the Ray started below and inherited by its workers
        tune_ray()
        if cfg.serve_tuned and not cfg.serves_https:  # HAProxy, as Serve sets it, is HTTP only
            ingress_dir = tune_serve(cfg)
    try:
        return _serve_until_stopped(cfg, host, port)
    finally:
        if ingress_dir is not None:  # Ray has stopped, and HAProxy with it
            shutil.rmtree(ingress_dir, ignore_errors=True)


def _serve_until_stopped(cfg: Config, host: str, port: int) -> int:
    import ray

    ray.init(
        address=cfg.ray_address,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
    )
    logging.getLogger("ray.serve").setLevel(logging.WARNING)

    def interrupt(*_) -> None:
        raise KeyboardInterrupt

    signal.signal(
        signal.SIGTERM, interrupt
    )  # stop as Ctrl-C does, even while starting (after ray.init: it sets its own)
    print(
        f"Starting ViFusion on {cfg.data_dir} (loading models takes a few seconds)...", flush=True
    )
    try:
        certfile = deploy(cfg, host, port)
        # the CLI asks this service from now on
        _running.announce(cfg.data_dir, host, port, certfile)
        scheme = "http" if certfile is None else "https"
        roots = ", ".join(map(str, cfg.ingest_roots)) or "none (file:// ingest is off)"
        print(
            f"ViFusion is serving.\n  web page: {scheme}://{host}:{port}/\n  API:      {scheme}://{host}:{port}/v1  "
            f"(Authorization: Bearer {_auth.api_key(cfg)})\n  ingest roots: {roots}\nCtrl-C stops it.",
            flush=True,
        )
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        print("Stopping ViFusion...", flush=True)
        _running.withdraw(cfg.data_dir)
        # Deleting the app lets the replica close its service (ingest queue, shards); jobs it
        # had acknowledged but not finished run again at the next start.
        with contextlib.suppress(Exception):
            serve.delete(APP_NAME)
        ray.shutdown()
    return 0
