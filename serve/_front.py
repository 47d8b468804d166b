"""The FastAPI app (``api``): the routes of serve/routes_*.py, and its outermost ASGI layer
(``Front``): the gate on the key, the signed URLs and the rate limits, the security headers,
and the request metrics."""

import time

from fastapi import Depends, FastAPI
from starlette._utils import get_route_path

from serve import (
    _auth,
    _collections,
    _docs,
    _errors,
    _metrics,
    routes_collections,
    routes_hooks,
    routes_keys,
    routes_media,
    routes_pages,
    routes_reindex,
    routes_search,
    routes_videos,
)
from serve._openapi import errors

api = FastAPI(
    title="ViFusion",
    version="1",
    description="Index video and find moments in it. Every /v1 route needs `Authorization: Bearer <key>`.",
    responses=errors(401, 422, 429),
    docs_url=None,  # /docs and /redoc come from serve/_docs.py: no CDN
    redoc_url=None,
)
_errors.install(api)
_docs.install(api)
# In this order, the order the OpenAPI schema and /docs list them in; each route checks the
# key's scope first (serve/_auth.py ROUTE_SCOPES), then that the video or job it names is in
# a collection the key reaches (serve/_collections.py).
for _routes in (
    routes_pages,
    routes_videos,
    routes_media,
    routes_search,
    routes_collections,
    routes_keys,
    routes_hooks,
    routes_reindex,
):
    api.include_router(
        _routes.router,
        dependencies=[Depends(_auth.needs_scope), Depends(_collections.in_reach)],
    )

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


class Front:
    """The outermost layer of the app: gates ``/v1`` on a key and the rate limit (leaving
    the caller in the request's scope, for the route's scope check), and
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
                admitted = _auth.GATE.admit(auth, _auth.client_address(scope), path)
                if not isinstance(admitted, _auth.Caller):
                    return await admitted(scope, receive, sending)
                scope[_auth.CALLER] = admitted  # for the scope check, once routed (needs_scope)
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


api.add_middleware(Front)
