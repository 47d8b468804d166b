"""The CLI's commands that write or administer a data dir (index, serve, list, delete,
reindex, status, plan; `check` is in ``check.py``), kept apart from argument parsing so tests can call them. The commands that
read the library (search, transcript) are in ``search_commands.py``."""

from __future__ import annotations

import json
import ssl
import sys
from pathlib import Path

from vifusion._files import StorageError
from vifusion.config import Config

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def cmd_index(
    cfg: Config, paths: list[Path], quiet: bool = False, collection: str = "default"
) -> int:
    from tqdm import tqdm

    from vifusion._files import storage_writes
    from vifusion.datadir import DataDirBusy
    from vifusion.ingest.inputs import IndexResult, Progress, expand_paths
    from vifusion.runtime import Runtime

    files, failed = expand_paths(paths)
    results: list[IndexResult] = list(failed)
    if files:
        try:
            rt = Runtime(cfg, writer=True)
        except StorageError as e:
            return _storage_failed(e)
        except (DataDirBusy, ValueError) as e:
            print(f"vifusion index: {e}", file=sys.stderr)
            return EXIT_USAGE
        with rt, tqdm(total=len(files), unit="video", disable=quiet, file=sys.stderr) as bar:

            def on_progress(ev: Progress | IndexResult) -> None:
                if isinstance(ev, Progress):
                    bar.set_postfix_str(
                        f"{Path(ev.path).name} {ev.frames_done}/{ev.frames_total} frames"
                    )
                else:
                    bar.update(1)

            try:
                with storage_writes(cfg.data_dir, "the rest of this run was not indexed"):
                    results += rt.indexer.index_files(files, on_progress, collection)
            except StorageError as e:
                bar.close()
                return _storage_failed(e)
    ready = [r for r in results if r.status == "ready"]
    skipped = [r for r in results if r.status == "skipped"]
    bad = [r for r in results if r.status == "failed"]
    frames = sum(r.frames for r in ready)
    print(
        f"indexed {len(ready)} video(s), {frames} frames; skipped {len(skipped)} already indexed; failed {len(bad)}"
    )
    for r in bad:
        print(f"  failed: {r.error}", file=sys.stderr)
    for warning in (w for r in ready for w in r.warnings):  # indexed all the same (no audio, say)
        print(f"  warning: {warning}", file=sys.stderr)
    return EXIT_FAILED if bad else EXIT_OK


def _storage_failed(e: StorageError) -> int:
    print(f"vifusion index: {e}", file=sys.stderr)
    if e.reason == "full":
        print(
            "Free some space and run the same command again: what is indexed is kept.",
            file=sys.stderr,
        )
    return EXIT_USAGE


def _clock(t: float) -> str:
    m, s = divmod(t, 60)
    return f"{int(m)}:{s:04.1f}"


def cmd_serve(cfg: Config, host: str, port: int) -> int:
    from serve._auth import WeakKey, api_key
    from serve.app import run
    from vifusion.datadir import DataDirUnwritable, check_writable

    try:  # say so here, not as a failed deployment of the app
        check_writable(cfg.data_dir)
        api_key(cfg)
    except (DataDirUnwritable, WeakKey) as e:
        print(f"vifusion serve: {e}", file=sys.stderr)
        return EXIT_USAGE
    return run(cfg, host, port)


def cmd_list(cfg: Config, status: str | None, as_json: bool) -> int:
    """Print the videos of the data dir, from its catalog (read-only: no Ray, a service may run)."""
    from vifusion.catalog import open_catalog
    from vifusion.cli.admin import all_videos, video_row

    catalog = open_catalog(cfg, read_only=True)  # NoCatalog: said by main
    try:
        rows = [video_row(v) for v in all_videos(catalog, status)]
    finally:
        catalog.close()
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return EXIT_OK
    if not rows:
        print("no videos" + (f" {status}" if status else "") + f" in {cfg.data_dir}")
        return EXIT_OK
    print(
        f"{'id':>5}  {'status':<8}  {'duration':>8}  {'frames':>6}  {'added':<19}  title  (source)"
    )
    for r in rows:
        duration = _clock(r["duration_s"]) if r["duration_s"] is not None else "-"
        print(
            f"{r['video_id']:>5}  {r['status']:<8}  {duration:>8}  {r['frames']:>6}  {r['added']:<19}  "
            f"{r['title']}  ({r['source']})"
        )
        if r["error"]:
            print(f"{'':>7}{r['error']}")
    return EXIT_OK


def cmd_delete(cfg: Config, video_ids: list[int]) -> int:
    """Delete videos: through the service that serves the data dir if one runs, else here,
    under the data dir's writer lock, without Ray (``admin.Deleter``). Exit 1 if any is unknown."""
    from vifusion.catalog import NoCatalog, open_catalog
    from vifusion.cli.admin import Deleter
    from vifusion.cluster.running import api_key, running_url, verify
    from vifusion.datadir import API_KEY, DataDirBusy, DataDirUnwritable, writer_lock

    url = running_url(cfg.data_dir)
    key = api_key(cfg) if url is not None else None
    if url is not None and key is None:
        print(
            f"vifusion delete: the service at {url} serves {cfg.data_dir}, and no API key is known "
            f"(set VIFUSION_API_KEY or put it in {cfg.data_dir / API_KEY})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if url is not None:
        import httpx

        from vifusion.client import ApiError

        try:
            deleted, missing = _delete_through(url, key, video_ids, verify(cfg.data_dir))
        except ApiError as e:
            print(f"vifusion delete: the service at {url} refused: {e.message}", file=sys.stderr)
            return EXIT_USAGE if e.status < 500 else EXIT_FAILED
        except httpx.HTTPError as e:
            print(
                f"vifusion delete: the service at {url} did not answer ({e}); nothing more was deleted",
                file=sys.stderr,
            )
            return EXIT_FAILED
    else:
        try:
            open_catalog(cfg, read_only=True).close()
            with writer_lock(cfg.data_dir):
                deleter = Deleter(cfg)
                try:
                    deleted, missing = [], []
                    for video_id in video_ids:
                        (deleted if deleter.delete(video_id) else missing).append(video_id)
                finally:
                    deleter.close()
        except (NoCatalog, DataDirBusy, DataDirUnwritable, ValueError, StorageError) as e:
            print(f"vifusion delete: {e}", file=sys.stderr)
            return EXIT_USAGE
    for video_id in deleted:
        print(f"deleted video {video_id}")
    for video_id in missing:
        print(f"not found: video {video_id}", file=sys.stderr)
    return EXIT_FAILED if missing else EXIT_OK


def _delete_through(
    url: str, key: str, video_ids: list[int], verify: ssl.SSLContext | bool = True
) -> tuple[list[int], list[int]]:
    """(deleted, not found) through the service's API; ApiError for any other refusal."""
    from vifusion.client import ApiError, Client

    deleted, missing = [], []
    with Client(url, key, verify=verify) as vf:
        for video_id in video_ids:
            try:
                vf.delete(video_id)
                deleted.append(video_id)
            except ApiError as e:
                if e.status != 404:
                    raise
                missing.append(video_id)
    return deleted, missing


def cmd_reindex(cfg: Config, quiet: bool = False) -> int:
    """Embed the library again with ``cfg.visual_model`` and switch to it (``ingest/reindex.py``),
    holding the writer lock; prints one JSON line of what it did."""
    from tqdm import tqdm

    from vifusion._files import storage_writes
    from vifusion.datadir import DataDirBusy, DataDirUnwritable, writer_lock
    from vifusion.ingest.reindex import reindex

    try:
        lock = writer_lock(cfg.data_dir)
    except DataDirBusy as e:
        print(
            f"vifusion reindex: {e} (a running service reindexes: POST /v1/reindex)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except DataDirUnwritable as e:
        print(f"vifusion reindex: {e}", file=sys.stderr)
        return EXIT_USAGE
    with lock, tqdm(unit="video", disable=quiet, file=sys.stderr) as bar:

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        try:
            with storage_writes(cfg.data_dir, "the library was not reindexed"):
                done = reindex(cfg, progress)
        except StorageError as e:
            return _storage_failed(e)
        except (
            OSError,
            ValueError,
        ) as e:  # a missing weights file, a bad model, another shard count
            print(f"vifusion reindex: {e}", file=sys.stderr)
            return EXIT_FAILED
    print(json.dumps(done.__dict__))
    return EXIT_OK


def cmd_status(cfg: Config, as_json: bool) -> int:
    """Print what the data dir holds and does: the service serving it, the visual model its
    index holds, videos by status, jobs (running, failed of late), each shard's rows, log and
    last snapshot. Reads only, no Ray."""
    from vifusion.catalog import open_catalog
    from vifusion.cli.admin import job_summary, shard_states
    from vifusion.cluster.running import running_url

    catalog = open_catalog(cfg, read_only=True)  # NoCatalog: said by main
    try:
        videos, jobs = catalog.counts(), job_summary(catalog)
        titles = {
            i: v.title
            for i, v in catalog.get_videos(
                [j["video_id"] for j in jobs["running"] + jobs["recent_failures"]]
            ).items()
        }
    finally:
        catalog.close()
    try:
        shards = [s.as_dict() for s in shard_states(cfg)]
    except ValueError as e:  # another shard count, a damaged log
        print(f"vifusion status: {e}", file=sys.stderr)
        return EXIT_FAILED
    report = {
        "data_dir": str(cfg.data_dir),
        "service": running_url(cfg.data_dir),
        "visual_model": cfg.visual_model,  # the index's (main() resolved it)
        "videos": videos,
        "jobs": jobs,
        "shards": shards,
    }
    if as_json:
        print(json.dumps(report))
        return EXIT_OK
    print(f"data dir: {cfg.data_dir}")
    print(f"service:  {'serving at ' + report['service'] if report['service'] else 'none running'}")
    print(f"model:    {cfg.visual_model}")
    print("videos:   " + (", ".join(f"{n} {s}" for s, n in sorted(videos.items())) or "none"))
    print(
        "jobs:     "
        + ", ".join(f"{n} {s}" for s, n in jobs["counts"].items() if n or s in ("queued", "failed"))
    )
    for j in jobs["running"]:
        print(
            f"  running  video {j['video_id']} {titles.get(j['video_id'])!r}: {j['stage'] or j['status']}, "
            f"{j['progress']:.0%}"
        )
    for j in jobs["recent_failures"]:
        print(
            f"  failed   video {j['video_id']} {titles.get(j['video_id'])!r} at {j['updated']}: {j['error']}"
        )
    for s in shards:
        rows = ", ".join(f"{space} {n}" for space, n in s["rows"].items()) or "empty"
        snapshot = f"last snapshot {s['snapshot_at']}" if s["snapshot_at"] else "no snapshot yet"
        print(
            f"shard {s['shard']}:  {rows}; {s['videos']} video(s); log {s['log_bytes']:,} bytes; {snapshot}"
        )
    return EXIT_OK


def cmd_plan(
    cfg: Config,
    cluster_yaml: Path | None,
    links: list[str],
    apply: bool,
    as_json: bool,
    recalibrate: bool = False,
) -> int:
    """``vifusion plan``: see ``vifusion.plan``."""
    from vifusion.plan import calibrate, hardware, planner

    if (cluster_yaml is None) == (cfg.ray_address is None):
        print(
            "vifusion plan: give CLUSTER.yaml or --address (a running cluster), not both",
            file=sys.stderr,
        )
        return EXIT_USAGE
    live = None
    try:
        if cluster_yaml is not None:
            cluster = hardware.from_yaml(cluster_yaml)
        else:
            import ray

            ray.init(address=cfg.ray_address, log_to_driver=False)
            cluster, live = hardware.from_ray()
        for link in links:
            name, _, spec = link.partition("=")
            rate, _, rtt = spec.partition("/")
            cluster = cluster.with_link(name, rate, float(rtt) if rtt else None)
    except (OSError, ValueError) as e:
        print(f"vifusion plan: {e}", file=sys.stderr)
        return EXIT_USAGE
    costs = calibrate.calibrate(cfg, cluster, live, refresh=recalibrate)
    try:
        report, plan = planner.make_plan(cfg, cluster, costs, live)
    except ValueError as e:
        print(f"vifusion plan: {e}", file=sys.stderr)
        return EXIT_FAILED
    where = planner.apply(cfg, plan) if apply else None
    if as_json:
        print(
            json.dumps(
                {
                    **planner.report_json(cluster, report, plan),
                    "applied": str(where) if where else None,
                }
            )
        )
        return EXIT_OK
    print(f"planned for {planner.videos_line(cfg, report)}")
    for line in planner.report_lines(cluster, report):
        print(line)
    print(
        f"applied: {where} (the next ingest places by it)"
        if where
        else "not applied (--apply writes it)"
    )
    return EXIT_OK
