"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) from files installed with the service: the
``fastapi_offline`` package ships both bundles. No CDN: the docs work offline, and no
third-party script runs on the origin whose storage holds the API key.

The pages load everything by relative URL (``docs/...``, ``openapi.json``), so they work
under a route prefix, and run no inline script (the Content-Security-Policy allows none):
Swagger UI starts from ``docs/swagger-init.js`` (in serve/static), ReDoc from its ``<redoc>`` element.
"""

import functools
from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response

from serve._errors import ApiError

_BUNDLES = files("fastapi_offline") / "static"
_FILES = {  # name -> (where, media type)
    "swagger-ui-bundle.js": (_BUNDLES, "text/javascript"),
    "swagger-ui.css": (_BUNDLES, "text/css"),
    "redoc.standalone.js": (_BUNDLES, "text/javascript"),
    "swagger-init.js": (Path(__file__).parent / "static", "text/javascript"),
}
_SWAGGER = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>{title} API</title><link rel="stylesheet" href="docs/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="docs/swagger-ui-bundle.js"></script><script src="docs/swagger-init.js"></script></body>
</html>
"""
_REDOC = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>{title} API</title></head>
<body><redoc spec-url="openapi.json"></redoc><script src="docs/redoc.standalone.js"></script></body>
</html>
"""


@functools.cache
def _read(name: str) -> bytes:
    where, _ = _FILES[name]
    return (where / name).read_bytes()


def install(api: FastAPI) -> None:
    """Add the docs routes (create ``api`` with ``docs_url=None, redoc_url=None``)."""

    @api.get("/docs", include_in_schema=False)
    def swagger() -> HTMLResponse:
        return HTMLResponse(_SWAGGER.format(title=api.title))

    @api.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return HTMLResponse(_REDOC.format(title=api.title))

    @api.get("/docs/{name}", include_in_schema=False)
    def asset(name: str) -> Response:
        if name not in _FILES:
            raise ApiError(404, "not_found", f"no docs file {name!r}")
        return Response(
            _read(name),
            media_type=_FILES[name][1],
            headers={"Cache-Control": "public, max-age=86400"},
        )
