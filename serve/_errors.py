"""Every error as ``{"error": {"code", "message"}}`` with a fitting status."""

import json

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "rate_limited",
    507: "insufficient_storage",
}


class ApiError(Exception):
    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        parts.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
    return "; ".join(parts) or "invalid request"


def install(api: FastAPI) -> None:
    from vifusion.ingest.sources import SourceError
    from vifusion.service import NotFound, StorageError

    @api.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.headers)

    @api.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return error_response(404, "not_found", str(exc))

    @api.exception_handler(StorageError)
    async def _storage(_: Request, exc: StorageError) -> JSONResponse:
        # The data dir is full or read-only: nothing was stored, searches still answer.
        return error_response(507, "insufficient_storage", str(exc))

    @api.exception_handler(SourceError)
    async def _refused(_: Request, exc: SourceError) -> JSONResponse:
        return error_response(exc.status, exc.code, str(exc))

    @api.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        return error_response(
            exc.status_code, _CODES.get(exc.status_code, "error"), message, exc.headers
        )

    @api.exception_handler(Exception)
    async def _bug(_: Request, exc: Exception) -> JSONResponse:
        # Reached only by a bug; Starlette logs the traceback. The client still gets JSON.
        return error_response(
            500, "internal", f"internal error ({type(exc).__name__}); see the service log"
        )

    @api.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(422, "invalid_request", _validation_message(exc))
