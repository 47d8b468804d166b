"""The Serve deployment (``ViFusionApp``: the FastAPI app of serve/_front.py, served by
replicas of serve/_replica.py) and starting it: on a running Ray (``deploy``), or on a Ray
of its own with the HAProxy ingress, until Ctrl-C or SIGTERM (``run``, for `vifusion serve`)."""

import contextlib
import logging
import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

from ray import serve

from serve import _auth, _ingress, _tls
from serve._front import api
from serve._replica import Replica
from vifusion.cluster import running as _running
from vifusion.cluster.actors import HEAD_RESOURCE
from vifusion.cluster.placement import API_ONGOING, planned_api_replicas
from vifusion.config import Config
from vifusion.runtime import tune_ray, with_applied_plan

# Ray Serve's throughput settings (Config.serve_tuned), measured by benchmarks/serve_load.py on
# 2 cores: HAProxy ingress and no separate user-code loop, 84 searches/s at 4 clients against
# 56 with Serve's defaults. The handlers never block the loop (blocking work goes to a pool).
SERVE_TUNED = {"RAY_SERVE_ENABLE_HA_PROXY": "1", "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0"}
APP_NAME = "vifusion"  # the Serve application, as `vifusion serve` and deploy/serve.yaml name it
ROUTE_PREFIX = "/"
SERVE_LOGGING = {"log_level": "WARNING"}  # no per-request access lines: /metrics has the figures


@serve.deployment(
    num_replicas=1, max_ongoing_requests=API_ONGOING, ray_actor_options={"num_cpus": 0}
)
@serve.ingress(api)
class ViFusionApp(Replica):
    """One API replica (serve/_replica.py), answering the routes of serve/routes_*.py."""


def replicas(cfg: Config) -> Any:
    """The deployment as ``cfg`` asks for it: one replica, or more (``api_replicas``, or an
    applied plan's count), autoscaled up to twice that under load (they share the shards and
    the ingest pool: ``shared_actors``). Every replica runs on the head node: uploads,
    thumbnails and the media they serve live on its disk (the nodes share none)."""
    options: dict[str, Any] = {
        "ray_actor_options": {"num_cpus": 0, "resources": {HEAD_RESOURCE: 0.001}}
    }
    plan = with_applied_plan(cfg).plan  # the deployment starts here: the plan's one read
    least = planned_api_replicas(plan, cfg.api_replicas, cfg.shared_actors)
    if least > 1:
        options |= {
            "num_replicas": "auto",
            "autoscaling_config": {
                "min_replicas": least,
                "max_replicas": 2 * least,
                "target_ongoing_requests": 8,
            },
        }
    return ViFusionApp.options(**options)


def deploy(cfg: Config, host: str, port: int) -> Path | None:
    """Start Serve's proxy on host:port and deploy the app (Ray must be up). Returns the
    certificate it serves HTTPS with (``cfg.serves_https``), None for plain HTTP."""
    http: dict[str, Any] = {"host": host, "port": port}
    certfile = None
    if cfg.serves_https:
        certfile, keyfile = _tls.ingress_pair(cfg)
        http |= {"ssl_certfile": str(certfile), "ssl_keyfile": str(keyfile)}
    # One proxy, on the head, where the replicas run; a proxy per node costs each node memory.
    serve.start(proxy_location="HeadOnly", http_options=http, logging_config=SERVE_LOGGING)
    serve.run(
        replicas(cfg).bind(cfg),
        name=APP_NAME,
        route_prefix=ROUTE_PREFIX,
        logging_config=SERVE_LOGGING,
    )
    return certfile


def tune_serve(cfg: Config) -> Path:
    """Set, for a Ray this process is about to start (its workers inherit them), Serve's
    throughput settings (``SERVE_TUNED``; values set already win) and those of its HAProxy
    ingress (serve/_ingress.py: its files in a private dir, its own pages on loopback or off,
    HAProxy killed with the service). Returns that dir, to remove once that Ray has stopped."""
    for name, value in SERVE_TUNED.items():
        os.environ.setdefault(name, value)
    run_dir = _ingress.private_dir()
    os.environ.update(_ingress.env(cfg, run_dir))
    return run_dir


def run(cfg: Config, host: str, port: int) -> int:
    """Start the service on a local Ray (or ``cfg.ray_address``) and serve until Ctrl-C."""
    ingress_dir = None
    if cfg.ray_address is None:  # read by the Ray started below and inherited by its workers
        tune_ray()
        if cfg.serve_tuned and not cfg.serves_https:  # HAProxy, as Serve sets it, is HTTP only
            ingress_dir = tune_serve(cfg)
    try:
        return _serve_until_stopped(cfg, host, port)
    finally:
        if ingress_dir is not None:  # Ray has stopped, and HAProxy with it
            shutil.rmtree(ingress_dir, ignore_errors=True)


def _serve_until_stopped(cfg: Config, host: str, port: int) -> int:
    import ray

    ray.init(
        address=cfg.ray_address,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
    )
    logging.getLogger("ray.serve").setLevel(logging.WARNING)

    def interrupt(*_) -> None:
        raise KeyboardInterrupt

    signal.signal(
        signal.SIGTERM, interrupt
    )  # stop as Ctrl-C does, even while starting (after ray.init: it sets its own)
    print(
        f"Starting ViFusion on {cfg.data_dir} (loading models takes a few seconds)...", flush=True
    )
    try:
        certfile = deploy(cfg, host, port)
        # the CLI asks this service from now on
        _running.announce(cfg.data_dir, host, port, certfile)
        scheme = "http" if certfile is None else "https"
        roots = ", ".join(map(str, cfg.ingest_roots)) or "none (file:// ingest is off)"
        print(
            f"ViFusion is serving.\n  web page: {scheme}://{host}:{port}/\n  API:      {scheme}://{host}:{port}/v1  "
            f"(Authorization: Bearer {_auth.api_key(cfg)})\n  ingest roots: {roots}\nCtrl-C stops it.",
            flush=True,
        )
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        print("Stopping ViFusion...", flush=True)
        _running.withdraw(cfg.data_dir)
        # Deleting the app lets the replica close its service (ingest queue, shards); jobs it
        # had acknowledged but not finished run again at the next start.
        with contextlib.suppress(Exception):
            serve.delete(APP_NAME)
        ray.shutdown()
    return 0
