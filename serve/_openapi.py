"""What the OpenAPI schema says that a handler's signature does not: the error statuses a
route answers, the range of a video id in a path, and the bodies of the routes that read
their own (an upload and a search each take JSON or a multipart form)."""

from typing import Any

from fastapi import Path as PathParam
from pydantic import BaseModel

from serve.schema import COLLECTION, MAX_VIDEO_ID, Error, SearchRequest, VideoByUri
from vifusion.ingest.sources import MAX_TITLE_CHARS


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route answering ``statuses`` with the API's error body."""
    return {status: {"model": Error} for status in statuses}


VideoId = PathParam(ge=1, le=MAX_VIDEO_ID)  # the default of a route's ``video_id`` parameter


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra=`` for a route that reads its JSON body itself (to bound its size)."""
    schema = model.model_json_schema()
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


UPLOAD_BODY = {
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
                        "collection": {"type": "string", "pattern": COLLECTION},
                    },
                }
            },
            "application/json": {"schema": VideoByUri.model_json_schema()},
        },
        "required": True,
    }
}
SEARCH_BODY = {
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
                        "fusion": {"type": "string", "enum": ["rrf", "calibrated", "evidence"]},
                        "languages": {
                            "type": "string",
                            "description": "comma-separated spoken-language codes (es, fr, ...)",
                        },
                        "collections": {
                            "type": "string",
                            "description": "comma-separated collection names",
                        },
                    },
                }
            },
        },
        "required": True,
    }
}
