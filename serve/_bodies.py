"""Request bodies the routes read themselves (an upload and a search take JSON or a multipart
form): each read within a byte limit (413 past it, whatever Content-Length said), parsed as
strict JSON, validated into a model, or decoded as an image, every failure an ``ApiError``."""

import contextlib
import io
import json
from pathlib import Path
from tempfile import SpooledTemporaryFile
from typing import Any

import numpy as np
from fastapi import Request
from pydantic import ValidationError
from starlette.formparsers import MultiPartException, MultiPartParser

from serve._errors import ApiError
from vifusion._files import storage_writes

MAX_IMAGE_PIXELS = 40_000_000


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


async def json_body(request: Request, limit: int, optional: bool = False) -> Any:
    """The request's body as JSON, ``limit`` bytes at most; ``optional``: {} for no body."""
    try:
        raw = await _limit_body(request, limit).body()
    except _TooLarge:
        raise ApiError(413, "too_large", f"request body over the {limit}-byte limit") from None
    return {} if optional and not raw.strip() else _parse_json(raw, "body")


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


async def form(request: Request, limit: int, max_field: int, spool: Path, outcome: str):
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


def kind(request: Request) -> str:
    """``json`` or ``form``, by the request's Content-Type (415 for any other)."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype == "application/json" or ctype.endswith("+json"):
        return "json"
    if ctype == "multipart/form-data":
        return "form"
    raise ApiError(415, "unsupported_media_type", "send application/json or multipart/form-data")


def json_field(value: Any, name: str) -> Any:
    """A form field ``name`` holding a JSON object, parsed (None when it was not sent)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ApiError(422, "invalid_request", f"{name} must be a form field, not a file")
    parsed = _parse_json(value, name)
    if not isinstance(parsed, dict):
        raise ApiError(422, "invalid_request", f"{name} must be a JSON object")
    return parsed


def model(cls, data: Any):
    """``data`` validated as ``cls``; a 422 naming the first few fields that failed."""
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        msg = "; ".join(
            f"{'.'.join(map(str, err['loc'])) or 'body'}: {err['msg']}" for err in e.errors()[:5]
        )
        raise ApiError(422, "invalid_request", msg) from None


def image(data: bytes) -> np.ndarray:
    """An uploaded image as RGB pixels, ``MAX_IMAGE_PIXELS`` at most."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.width * im.height > MAX_IMAGE_PIXELS:
                raise ApiError(
                    413,
                    "too_large",
                    f"image is {im.width}x{im.height}; the limit is {MAX_IMAGE_PIXELS} pixels",
                )
            return np.asarray(im.convert("RGB"))
    except UnidentifiedImageError:
        raise ApiError(
            422, "invalid_image", "not a readable image (send JPEG, PNG, WebP, GIF, BMP or TIFF)"
        ) from None
    except Image.DecompressionBombError:
        raise ApiError(
            413, "too_large", f"image is over the {MAX_IMAGE_PIXELS}-pixel limit"
        ) from None
    except (OSError, ValueError) as e:  # truncated or corrupt data in a known format
        raise ApiError(
            422, "invalid_image", f"image cannot be decoded: {type(e).__name__}"
        ) from None
