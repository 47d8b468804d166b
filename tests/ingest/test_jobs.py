"""The ingest queue: acknowledged jobs survive a crash and run when the service starts again;
URL sources are fetched by their job."""

from __future__ import annotations

import functools
import http.server
import sqlite3
import threading
import time
import types
import zlib

import pytest

from tests._helpers import QuietHandler, final_status, serving
from vifusion.catalog import Catalog, open_catalog
from vifusion.catalog._sqlite import SqliteCatalog
from vifusion.config import Config
from vifusion.samples import write_demo_set


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    return {v.name: v for v in write_demo_set(tmp_path_factory.mktemp("jobs-videos"))}


@pytest.fixture
def http_root(videos):
    handler = functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(videos["street.mp4"].path.parent)
    )
    handler.log_message = lambda *a: None
    with serving(handler) as url:
        yield url


@pytest.mark.slow
def test_interrupted_and_queued_jobs_run_after_a_restart_and_urls_are_fetched(
    ray_session, tmp_path, videos, http_root
):
    from vifusion.service import Service

    # dedup off: every sampled frame is one vector, so counts below are frames
    cfg = Config(data_dir=tmp_path / "data", allow_private_urls=True, dedup_cosine=1.01)
    # What a crash leaves: one job caught mid-indexing, one still queued (both acknowledged).
    catalog = open_catalog(cfg)
    cut, cut_job = catalog.add_video(str(videos["kitchen.mp4"].path), "kitchen")
    catalog.update_job(cut_job, "indexing", progress=0.5, frames_indexed=6)
    queued, queued_job = catalog.add_video(str(videos["launch.mp4"].path), "launch")
    catalog.close()

    with Service(cfg) as service:
        fetched = service.ingest_uri(f"{http_root}/street.mp4", metadata={"via": "http"})
        missing = service.ingest_uri(f"{http_root}/nope.mp4")
        for job in (cut_job, queued_job, fetched.job_id):
            assert final_status(service.catalog, job) == "ready"
        assert final_status(service.catalog, missing.job_id) == "failed"
        assert "HTTP 404" in service.job(missing.job_id).error
        street = service.video(fetched.video_id)
        assert street.media_path.read_bytes() == videos["street.mp4"].path.read_bytes()
        assert street.title == "street" and street.frames_indexed == 12
        assert service.health()["vectors"] == 36  # 3 x 12 frames: the re-run added none twice
        page = service.search(text="a cat", top_k=1)
        assert page.results[0].video_id == cut
        jpeg = service.thumbnail(fetched.video_id, 3.0)
        assert jpeg[:3] == b"\xff\xd8\xff"
        service.delete(fetched.video_id)
        assert not street.media_path.exists()
        assert service.health()["vectors"] == 24


# -- the job runner, with the extractors faked -----------------------------------------
# A real catalog and real worker threads; the extractors (loading models, decoding) are not
# what these tests are about, so ``run_job`` is a stand-in that writes the job's progress
# through the runner's catalog as the real indexer does, and holds it until ``release``.


class _Indexer:
    def __init__(self, catalog: Catalog, extractors: int) -> None:
        self.catalog = catalog
        self.extractors = list(range(extractors))
        self.runs: list[tuple[str, str]] = []  # (job id, the worker thread that ran it)
        self.release = threading.Event()

    def run_job(self, actor, path, video_id, job_id, follow_symlinks=True):
        self.runs.append((job_id, threading.current_thread().name))
        self.catalog.check_lease(job_id)
        self.catalog.update_job(job_id, "indexing", progress=0.1, frames_indexed=1)
        assert self.release.wait(60)
        self.catalog.update_job(job_id, "ready", frames_indexed=12)
        return types.SimpleNamespace(status="ready", frames=12)


class _Shards:
    def __init__(self) -> None:
        self.deleted: list[int] = []

    def delete_video(self, video_id: int) -> None:
        self.deleted.append(video_id)


class _Runtime:
    def __init__(self, catalog: Catalog, extractors: int) -> None:
        self.catalog, self.shards = catalog, _Shards()
        self.indexer = _Indexer(catalog, extractors)

    def running_indexer(self):
        return self.indexer

    def stop_indexer(self) -> None:
        pass


class _Outage(SqliteCatalog):
    """The real catalog, whose heartbeat (lease renewal) fails while ``down``: an outage as
    the renewal sees it, which takes and job writes outlive."""

    down = False

    def renew_leases(self, owner: str, lease_s: float) -> list[str]:
        if self.down:
            raise sqlite3.OperationalError("unable to open database file")
        return super().renew_leases(owner, lease_s)


def until(check, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.fixture
def runner(tmp_path):
    """Start ``JobRunner(cfg, <a runtime around a real SQLite catalog>, "pool")``; closed after."""
    from vifusion.ingest.jobs import JobRunner

    started: list[JobRunner] = []

    def start(**settings) -> JobRunner:
        cfg = Config(data_dir=tmp_path / "data", allow_private_urls=True, **settings)
        catalog = _Outage(cfg.data_dir / "catalog.db")
        started.append(JobRunner(cfg, _Runtime(catalog, cfg.num_extractors), "pool"))
        return started[-1]

    yield start
    for r in started:
        r.rt.indexer.release.set()
        r.close()
        r.catalog.close()


def _video_file(tmp_path, name: str) -> str:
    path = tmp_path / name
    path.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(100))
    return str(path)


def test_a_job_whose_lease_ran_out_is_not_taken_again_by_a_sibling_worker(runner, tmp_path):
    """Two workers in one runner; the catalog cannot be reached by the heartbeat for longer
    than the lease while one of them runs a job. The idle one, taking the next job, passes
    over the running one (it took it again, as the same owner, and ran it twice); once the
    catalog is back the heartbeat keeps it, and each job runs once."""
    r = runner(num_extractors=2, job_lease_s=0.6)
    cat, indexer = r.catalog, r.rt.indexer
    _, first = cat.add_video(_video_file(tmp_path, "a.mp4"), "a")
    r.wake()
    until(lambda: len(indexer.runs) == 1, "the first job starts")
    cat.down = True
    until(lambda: cat.get_job(first).lease_until < time.time(), "its lease runs out")
    _, second = cat.add_video(_video_file(tmp_path, "b.mp4"), "b")
    r.wake()
    until(lambda: len(indexer.runs) == 2, "the idle worker takes a job")
    assert indexer.runs[1][0] == second, indexer.runs  # not the running one again
    assert indexer.runs[0][1] != indexer.runs[1][1]  # by the other worker
    cat.down = False
    indexer.release.set()
    until(lambda: {cat.get_job(j).status for j in (first, second)} == {"ready"}, "both end")
    assert sorted(job for job, _ in indexer.runs) == sorted([first, second])  # each once
    owners = {cat.get_job(j).lease_owner for j in (first, second)}
    assert owners == {f"{r.owner}/ingest-0", f"{r.owner}/ingest-1"}  # each worker its own
    assert cat.get_job(first).attempts == 1
    assert (r.stats.jobs_ready, r.stats.jobs_failed) == (2, 0)


def test_a_job_whose_workers_died_three_times_is_failed_not_run(runner, tmp_path):
    """What a video that kills the ingest pool each time leaves: a job taken three times by
    workers that died (their leases ran out). The next take fails it, saying so, without
    running it, and clears what its runs left in the shards; the queue goes on."""
    cat = open_catalog(Config(data_dir=tmp_path / "data"))
    vid, doomed = cat.add_video(_video_file(tmp_path, "a.mp4"), "a")
    for n in (1, 2, 3):
        assert cat.lease_job(f"dead/{n}", 0.0).id == doomed
        cat.holder = f"dead/{n}"
        cat.update_job(doomed, "indexing", progress=0.5, stage="frames")
    time.sleep(0.01)  # the last lease ran out
    _, fine = cat.add_video(_video_file(tmp_path, "b.mp4"), "b")

    cat.close()
    r = runner(job_max_attempts=3)
    r.rt.indexer.release.set()
    until(lambda: r.catalog.get_job(fine).status == "ready", "the next job runs")
    job = r.catalog.get_job(doomed)
    reason = "the ingest worker died 3 times while running this job (last: in stage frames, worker dead/3)"
    assert (job.status, job.error) == ("failed", reason)
    assert r.catalog.get_video(vid).error == reason
    assert [j for j, _ in r.rt.indexer.runs] == [fine]  # the doomed one never ran
    assert r.rt.shards.deleted == [vid]  # its earlier runs' vectors are gone
    assert (r.stats.jobs_ready, r.stats.jobs_failed) == (1, 1)


class _GzipBomb(QuietHandler):
    """``body``: 4 MiB of zeros gzipped twice (about 100 bytes), sent as
    ``Content-Encoding: gzip, gzip``."""

    body = b""

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "video/mp4")
        self.send_header("Content-Encoding", "gzip, gzip")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)


def test_a_url_that_sends_a_gzip_bomb_fails_its_job_saying_why(runner):
    """The fetch refuses the encoded body before decoding a byte of it (its memory:
    tests/ingest/test_fetch.py); the job fails with the reason and its folder is removed."""
    _GzipBomb.body = zlib.compress(zlib.compress(bytes(4 << 20), 9, wbits=31), 9, wbits=31)
    with serving(_GzipBomb) as base:
        r = runner(max_upload_bytes=1 << 20)
        url = f"{base}/bomb.mp4"
        vid, job = r.catalog.add_video(url, "bomb")
        r.wake()
        until(lambda: r.catalog.get_job(job).status == "failed", "the job fails")
    error = r.catalog.get_job(job).error
    assert error.startswith(f"fetching {url}: the server sent gzip, gzip-encoded content;"), error
    assert r.rt.indexer.runs == [] and r.catalog.get_video(vid).media is None
    assert not list((r.cfg.data_dir / "media").iterdir())  # no file left of it
