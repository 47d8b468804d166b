"""Routes: the web page and its files, and the probes (``/healthz``, ``/metrics``); none
needs the key."""

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

from serve import _metrics
from serve._errors import ApiError
from serve._replica import Serving
from serve.schema import Health

STATIC = Path(__file__).parent / "static"
_PAGES = {"app.js": "text/javascript", "style.css": "text/css"}

router = APIRouter()


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def page() -> HTMLResponse:
    return HTMLResponse((STATIC / "index.html").read_text())


@router.get("/static/{name}", include_in_schema=False)
def static(name: str) -> Response:
    if name not in _PAGES:
        raise ApiError(404, "not_found", f"no static file {name!r}")
    return Response((STATIC / name).read_bytes(), media_type=_PAGES[name])


@router.get("/healthz", response_model=Health)
def healthz(replica: Serving) -> dict:
    return replica.service.health()


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
def metrics(replica: Serving) -> Response:
    return Response(
        _metrics.METRICS.render(replica.service.stats()), media_type="text/plain; version=0.0.4"
    )
