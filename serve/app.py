"""The HTTP service: a Ray Serve deployment with a FastAPI ingress over ``vifusion.service``.

Handlers parse, authenticate, rate-limit and format; the work is the library's. Every
``/v1`` route needs ``Authorization: Bearer <key>``; ``/healthz``, ``/metrics`` and the web
page (``/``) do not, and ``/media/{id}`` needs a signed URL's signature instead
(serve/_signed.py). Errors are ``{"error": {"code", "message"}}``.

Replicas accept videos and answer searches; the jobs run in the data dir's one ingest pool
(vifusion/ingest/pool.py). On one machine a replica owns the data dir (the writer lock); with
``shared_actors`` any number of replicas share it, the shard replicas and the pool.

This module is the service's stable name (``serve.app:build`` in deploy/serve.yaml, and what
the CLI, the benchmarks and the tests import); the parts are:

- serve/_front.py: the FastAPI app and its outer ASGI layer (gate, security headers, metrics);
- serve/routes_pages.py, routes_videos.py, routes_media.py, routes_search.py: the routes,
  each given the replica that answers it (serve/_replica.py: its Service, Config and pools);
- serve/_bodies.py (request bodies and their limits), _cursors.py, _views.py (response
  bodies), _ranges.py (byte-range video responses), _openapi.py (what the schema adds);
- serve/deploy.py: the deployment, starting it, HAProxy, stopping on a signal.

No `from __future__ import annotations` in the route modules: FastAPI must see the request
models' real classes through Serve's ingress wrapper, or it takes a body for a query parameter.
"""

from pathlib import Path
from typing import Any

from ray.serve import Application

from serve._front import api
from serve._views import moments
from serve.deploy import (
    APP_NAME,
    ROUTE_PREFIX,
    SERVE_LOGGING,
    SERVE_TUNED,
    ViFusionApp,
    deploy,
    replicas,
    run,
    tune_serve,
)
from vifusion.config import Config

__all__ = [
    "APP_NAME",
    "ROUTE_PREFIX",
    "SERVE_LOGGING",
    "SERVE_TUNED",
    "ViFusionApp",
    "api",
    "build",
    "deploy",
    "moments",
    "replicas",
    "run",
    "tune_serve",
]


def build(args: dict[str, Any]) -> Application:
    """The app for `serve deploy` (``import_path: serve.app:build``; see deploy/serve.yaml).

    ``args`` are Config fields (``data_dir``, ``num_shards``, ...) plus an optional
    ``config_file`` (JSON); ``VIFUSION_*`` variables of the app's runtime_env apply as for the
    CLI, ``args`` winning. An unknown field fails the deploy (Config forbids extras)."""
    args = dict(args)
    file = args.pop("config_file", None)
    cfg = Config.load(file=Path(file) if file else None, **args)
    return replicas(cfg).bind(cfg)
