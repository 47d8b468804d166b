"""One API replica's state, which every route (serve/routes_*.py) reads through its first
parameter (``replica: Serving``): its Config, its Service over the data dir, and the thread
pools that blocking work runs on.

The routes are plain functions, not methods: Serve ships the app to the replica's process
by pickling it, and a function pickled by reference (every module-level one) arrives as it
is defined, so its dependencies must be in its own signature."""

import asyncio
import contextlib
import functools
import io
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated

from fastapi import Depends
from ray import serve

from serve import _auth
from vifusion.config import Config

_CLIP_WORKERS = 2  # clip searches decoding at once; more wait their turn


class Replica:
    """The deployment's class (serve/deploy.py ``ViFusionApp``): Serve makes one per replica."""

    def __init__(self, cfg: Config) -> None:
        import torch

        from vifusion.service import Service

        torch.set_num_threads(cfg.query_threads)
        self.cfg = cfg
        _auth.GATE.configure(_auth.api_key(cfg), cfg)
        # A replica replacing this one (a redeploy) waits for it to let go of the data dir.
        self.service = Service(cfg, wait_s=120)
        _auth.GATE.use_keys(self.service.catalog)  # the stored keys, looked up as they are used
        # Blocking work runs here, not on Serve's event loop: a fixed pool, so threads (and
        # their SQLite connections) are reused instead of made per request.
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="vifusion-api")
        # Clip searches decode video (seconds each, within their caps): on a pool of their own,
        # so a burst of them queues there instead of holding every thread the others need.
        self.clip_pool = ThreadPoolExecutor(
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

    async def blocking(self, fn, *args):
        """``fn(*args)`` on the replica's thread pool, off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(
            self.pool, functools.partial(fn, *args)
        )


def _serving() -> Replica:
    return serve.get_replica_context().servable_object


Serving = Annotated[Replica, Depends(_serving)]  # the replica answering the request
