"""The HTTP service (first form): a Ray Serve deployment with a FastAPI ingress.

Routes: ``GET /healthz`` (no key) and ``POST /v1/search`` with ``{"text", "top_k"}``.
Every ``/v1`` route needs ``Authorization: Bearer <key>``. Ingest, jobs, image and clip
search over HTTP, and the web page come with the REST issue; the index is read at start.

No `from __future__ import annotations` here: FastAPI must see the request model's real
class through Serve's ingress wrapper, or it takes the body for a query parameter.
"""


import contextlib
import io
import secrets
import signal
import threading
import time

from fastapi import FastAPI, Header, HTTPException
from pydantic import BaseModel, Field
from ray import serve

from vifusion.config import Config

api = FastAPI(title="ViFusion")


class TextSearch(BaseModel):
    text: str = Field(min_length=1, max_length=1000)
    top_k: int = Field(10, ge=1, le=100)


def api_key(cfg: Config) -> str:
    """``cfg.api_key`` if set, else the key generated once into the data dir."""
    if cfg.api_key:
        return cfg.api_key
    path = cfg.data_dir / "api_key"
    if not path.exists():
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(32))
    return path.read_text().strip()


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0})
@serve.ingress(api)
class ViFusionApp:
    def __init__(self, cfg: Config) -> None:
        import torch

        from vifusion.catalog import Catalog
        from vifusion.extract.model import Embedder
        from vifusion.index import ShardSet
        from vifusion.search import Searcher

        torch.set_num_threads(cfg.query_threads)
        self.key = api_key(cfg)
        self.catalog = Catalog(cfg.data_dir / "catalog.db")
        self.shards = ShardSet(cfg)
        with contextlib.redirect_stdout(io.StringIO()):
            embedder = Embedder(cfg.conse_top_k, cache_dir=cfg.data_dir / "models")
        self.searcher = Searcher(cfg, self.shards, embedder)

    def _check(self, authorization: str | None) -> None:
        given = (authorization or "").removeprefix("Bearer ").strip()
        if not secrets.compare_digest(given.encode(), self.key.encode()):
            raise HTTPException(401, {"code": "unauthorized", "message": "missing or wrong API key"})

    @api.get("/healthz")
    def healthz(self) -> dict:
        stats = self.shards.stats()
        return {"status": "ok", "shards": len(stats), "vectors": sum(s["vectors"]["visual"] for s in stats)}

    @api.post("/v1/search")
    def search(self, req: TextSearch, authorization: str | None = Header(None)) -> dict:
        self._check(authorization)
        t0 = time.perf_counter()
        segments = self.searcher.text(req.text, req.top_k)
        videos = self.catalog.get_videos([s.video_id for s in segments])
        results = [
            {"video_id": s.video_id, "title": videos[s.video_id].title if s.video_id in videos else None,
             "start_s": s.start_s, "end_s": s.end_s, "score": s.score}
            for s in segments
        ]
        return {"results": results, "took_ms": round((time.perf_counter() - t0) * 1000, 1)}


def run(cfg: Config, host: str, port: int) -> int:
    """Start the service on a local Ray (or ``cfg.ray_address``) and serve until Ctrl-C."""
    import logging

    import ray

    ray.init(address=cfg.ray_address, include_dashboard=False, logging_level=logging.ERROR)
    serve.start(http_options={"host": host, "port": port})
    serve.run(ViFusionApp.bind(cfg), name="vifusion", route_prefix="/")
    print(f"ViFusion is serving on http://{host}:{port}  (API key: {api_key(cfg)})", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    serve.shutdown()
    ray.shutdown()
    return 0
