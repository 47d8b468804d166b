"""Routes: search, by text, an image, a clip (uploaded, or a stretch of an indexed video); the
languages a search may be limited to."""

import asyncio
import base64
import binascii
import functools
import time
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from serve import _bodies, _collections, _metrics
from serve._cursors import search_cursor, search_offset
from serve._errors import ApiError
from serve._openapi import SEARCH_BODY, errors
from serve._replica import Replica, Serving
from serve._views import moments
from serve.schema import SearchRequest, SearchResults
from vifusion._files import fd_path, storage_writes
from vifusion.query.clips import ClipRefused
from vifusion.query.lexicon import Lexicon

# The request's fields that the service's search takes as they are (the cursor becomes an offset).
_OPTIONS = {
    "top_k",
    "group_by",
    "filter",
    "languages",
    "min_score",
    "min_relative_score",
    "modalities",
    "fusion",
}
# Not given a collection, a search looks in every one its key reaches (serve/_collections.py).

router = APIRouter()


@router.post(
    "/v1/search",
    response_model=SearchResults,
    openapi_extra=SEARCH_BODY,
    responses=errors(400, 404, 413, 415),
)
async def search(replica: Serving, request: Request) -> dict:
    t0 = time.perf_counter()
    clip_file = None
    if _bodies.kind(request) == "json":
        req = _bodies.model(
            SearchRequest, await _bodies.json_body(request, replica.cfg.max_json_bytes)
        )
        query: dict[str, Any] = {}
        if req.image_b64 is not None:
            try:
                query["image"] = await replica.blocking(
                    _bodies.image, base64.b64decode(req.image_b64, validate=True)
                )
            except (binascii.Error, ValueError) as e:
                raise ApiError(422, "invalid_image", f"image_b64 is not base64: {e}") from None
    else:
        limit = max(replica.cfg.max_query_clip_bytes, replica.cfg.max_json_bytes) + (
            1 << 20
        )  # a clip, or an image
        form = await _bodies.form(
            request, limit, 1 << 16, replica.service.spool, "the search was not run"
        )
        files = {k: form[k] for k in ("image", "clip") if k in form}
        if any(isinstance(f, str) for f in files.values()):
            raise ApiError(422, "invalid_request", "image and clip must be files")
        fields = {k: v for k, v in form.items() if k not in files}
        if "filter" in fields:
            fields["filter"] = _bodies.json_field(fields["filter"], "filter")
        if isinstance(fields.get("languages"), str):  # a form says them comma-separated
            fields["languages"] = [x.strip() for x in fields["languages"].split(",") if x.strip()]
        req = _bodies.model(SearchRequest, fields)
        query = {}
        if "image" in files:
            query["image"] = await replica.blocking(_bodies.image, await files["image"].read())
        if "clip" in files:
            clip_file = files["clip"]
            if clip_file.size is not None and clip_file.size > replica.cfg.max_query_clip_bytes:
                raise ApiError(
                    413,
                    "too_large",
                    f"the clip is {clip_file.size} bytes; the limit is "
                    f"{replica.cfg.max_query_clip_bytes}",
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
            raise ApiError(422, "invalid_query", "a clip of an indexed video needs start_s < end_s")
        query["stored_clip"] = (req.video_id, req.start_s, req.end_s)
        # The clip's video, as any video a route names: 404 beyond the key's collections.
        video = await replica.blocking(replica.service.catalog.get_video, req.video_id)
        if video is not None and not _collections.reaches(request, video.collection):
            raise ApiError(404, "not_found", f"no video {req.video_id}")
    options = req.model_dump(include=_OPTIONS) | {
        "offset": search_offset(req.cursor),
        "collections": _collections.searched(request, req.collections),
    }
    pool = replica.clip_pool if clip_file is not None else replica.pool
    body = await asyncio.get_running_loop().run_in_executor(
        pool, functools.partial(_search, replica, query, clip_file, options, kinds[0])
    )
    body["took_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    return body


def _search(replica: Replica, query: dict, clip_file, options: dict, kind: str) -> dict:
    """The search and its response body (but ``took_ms``), on a worker thread."""
    from vifusion.extract.decode import DecodeError

    t0 = time.perf_counter()
    try:
        if clip_file is not None:
            # The spooled clip itself, decoded through its descriptor: no copy. A clip
            # still in memory is put on disk first, in the data dir's spool.
            with storage_writes(replica.cfg.data_dir, "the search was not run"):
                fd = clip_file.file.fileno()
            page = replica.service.search(clip=Path(fd_path(fd)), **options)
        else:
            page = replica.service.search(**query, **options)
    except DecodeError as e:
        raise ApiError(422, "invalid_clip", str(e)) from None
    except ClipRefused as e:
        raise ApiError(e.status, e.code, str(e)) from None
    except ValueError as e:  # NotFound (an unknown video) goes on to its 404 handler
        raise ApiError(422, "invalid_query", str(e)) from None
    finally:
        _metrics.METRICS.search_latency.labels(kind).observe(time.perf_counter() - t0)
    return {
        "results": moments(replica.service, page),
        "next_cursor": search_cursor(page.next_offset),
        "partial": bool(page.missing_shards),
        "missing_shards": list(page.missing_shards),
    }


class LanguageOut(BaseModel):
    code: str = Field(description="ISO 639-1, as a search's ``languages`` names it")
    videos: int = Field(
        description="its ready videos (a video counts in the language it starts in)"
    )
    dictionary: bool = Field(
        description="whether an English query also finds its words through a bilingual "
        "dictionary installed on the server (``dictionaries``); otherwise through the "
        "English rendering only"
    )


class LanguageList(BaseModel):
    languages: list[LanguageOut]


@router.get("/v1/languages", response_model=LanguageList)
def languages(replica: Serving, request: Request) -> dict:
    """The languages spoken in the videos the key reaches, by code."""
    counts = replica.service.catalog.spoken_languages(
        collections=_collections.searched(request, None)
    )
    reached = Lexicon(replica.cfg.dictionaries).languages
    return {
        "languages": [
            {"code": code, "videos": n, "dictionary": code in reached}
            for code, n in sorted(counts.items())
        ]
    }
