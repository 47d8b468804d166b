"""The CLI's commands, kept apart from argument parsing so tests can call them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vifusion._files import StorageError
from vifusion.config import Config
from vifusion.ranking import MODALITIES, Moment, bracketed, snippet_fields

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def cmd_index(cfg: Config, paths: list[Path], quiet: bool = False) -> int:
    from tqdm import tqdm

    from vifusion._files import storage_writes
    from vifusion.indexer import IndexResult, Progress, expand_paths
    from vifusion.runtime import DataDirBusy, Runtime

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
                    bar.set_postfix_str(f"{Path(ev.path).name} {ev.frames_done}/{ev.frames_total} frames")
                else:
                    bar.update(1)

            try:
                with storage_writes(cfg.data_dir, "the rest of this run was not indexed"):
                    results += rt.indexer.index_files(files, on_progress)
            except StorageError as e:
                bar.close()
                return _storage_failed(e)
    ready = [r for r in results if r.status == "ready"]
    skipped = [r for r in results if r.status == "skipped"]
    bad = [r for r in results if r.status == "failed"]
    frames = sum(r.frames for r in ready)
    print(f"indexed {len(ready)} video(s), {frames} frames; skipped {len(skipped)} already indexed; failed {len(bad)}")
    for r in bad:
        print(f"  failed: {r.error}", file=sys.stderr)
    for warning in (w for r in ready for w in r.warnings):  # indexed all the same (no audio, say)
        print(f"  warning: {warning}", file=sys.stderr)
    return EXIT_FAILED if bad else EXIT_OK


def _storage_failed(e: StorageError) -> int:
    print(f"vifusion index: {e}", file=sys.stderr)
    if e.reason == "full":
        print("Free some space and run the same command again: what is indexed is kept.", file=sys.stderr)
    return EXIT_USAGE


def _load_image(path: Path):
    import numpy as np
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except (UnidentifiedImageError, OSError) as e:
        raise ValueError(f"{path}: not an image ({e})") from None


def cmd_search(
    cfg: Config, text: str | None, image: Path | None, clip: Path | None, top_k: int, as_json: bool,
    modalities: list[str] | None = None,
) -> int:
    from vifusion.extract.decode import DecodeError
    from vifusion.runtime import Runtime

    try:
        rt = Runtime(cfg)
    except (ValueError, StorageError) as e:
        print(f"vifusion search: {e}", file=sys.stderr)
        return EXIT_USAGE
    with rt:
        try:
            if text is not None:
                segments = rt.searcher.text(text, top_k, modalities=modalities or MODALITIES)
            elif image is not None:
                segments = rt.searcher.image(_load_image(image), top_k)
            else:
                segments = rt.searcher.clip(clip, top_k)
        except (ValueError, DecodeError) as e:
            print(f"vifusion search: {e}", file=sys.stderr)
            return EXIT_USAGE
        videos = rt.catalog.get_videos([s.video_id for s in segments])
    rows = [_result(s, videos.get(s.video_id)) for s in segments]
    if as_json:
        for row in rows:
            print(json.dumps(row))
    elif not rows:
        print("no results (is anything indexed in this data dir?)")
    else:
        print(f"{'score':>6}  {'time':>15}  {'matched':<20}  video")
        for r in rows:
            span = f"{_clock(r['start_s'])}-{_clock(r['end_s'])}"
            print(f"{r['score']:6.3f}  {span:>15}  {','.join(r['matched']):<20}  {r['title']}  ({r['source']})")
            if r["snippet"]:
                print(f"{'':>25}{' '.join(bracketed(r['snippet'], r['highlights']).split())}")
    return EXIT_OK


def _result(m: Moment, video) -> dict:
    return {
        "video_id": m.video_id,
        "title": video.title if video else None,
        "source": video.source if video else None,
        "start_s": round(m.start_s, 3),
        "end_s": round(m.end_s, 3),
        "score": round(m.score, 4),
        "matched": m.matched,
        **snippet_fields(m.snippet),
    }


def _clock(t: float) -> str:
    m, s = divmod(t, 60)
    return f"{int(m)}:{s:04.1f}"


def cmd_transcript(cfg: Config, video_id: int, kind: str, vtt: bool) -> int:
    """Print what a video says (or shows written): from the catalog alone, no Ray."""
    from vifusion._webvtt import webvtt
    from vifusion.catalog import Catalog

    path = cfg.data_dir / "catalog.db"
    if not path.is_file():
        print(f"vifusion transcript: no catalog in {cfg.data_dir} (is this the data dir?)", file=sys.stderr)
        return EXIT_USAGE
    catalog = Catalog(path)
    try:
        if catalog.get_video(video_id) is None:
            print(f"vifusion transcript: no video {video_id} in {cfg.data_dir}", file=sys.stderr)
            return EXIT_FAILED
        rows = catalog.texts(video_id, None if kind == "all" else kind)
    finally:
        catalog.close()
    if vtt:
        print(webvtt(rows), end="")
    else:
        for r in rows:
            print(f"{_clock(r.start_s):>7}-{_clock(r.end_s):<7}  {r.kind:<6}  {r.text}")
    return EXIT_OK


def cmd_serve(cfg: Config, host: str, port: int) -> int:
    from serve._auth import WeakKey, api_key
    from serve.app import run
    from vifusion.runtime import DataDirUnwritable, open_writer_lock

    try:  # say so here, not as a failed deployment of the app
        open_writer_lock(cfg.data_dir).close()
        api_key(cfg)
    except (DataDirUnwritable, WeakKey) as e:
        print(f"vifusion serve: {e}", file=sys.stderr)
        return EXIT_USAGE
    return run(cfg, host, port)


def cmd_check(cfg: Config, fix: bool) -> int:
    from ray.exceptions import RayActorError

    from vifusion.check import find_drift, find_leftovers, remove_leftovers, repair
    from vifusion.runtime import DataDirBusy, Runtime

    try:
        rt = Runtime(cfg, writer=True)  # a running service changes both sides: check a quiet data dir
    except (DataDirBusy, ValueError, StorageError) as e:
        print(f"vifusion check: {e}", file=sys.stderr)
        return EXIT_USAGE
    except RayActorError as e:  # a shard refused to start (a damaged log or snapshot): its reason, not Ray's
        print(f"vifusion check: a shard cannot start: {str(e).strip().splitlines()[-1]}", file=sys.stderr)
        return EXIT_FAILED
    with rt:
        drift = find_drift(rt.catalog, rt.shards)
        leftovers = find_leftovers(cfg.data_dir, rt.catalog)
        ready = len(rt.catalog.ready_ids())
        for d in drift:
            print(f"{d.kind:9} video {d.video_id}: {d.detail}")
        for item in leftovers:
            print(f"leftover  {item.path.relative_to(cfg.data_dir)}: {item.detail}")
        found = len(drift) + len(leftovers)
        if found and fix:
            repair(drift, rt.catalog, rt.shards)
            remove_leftovers(leftovers)
            left = len(find_drift(rt.catalog, rt.shards)) + len(find_leftovers(cfg.data_dir, rt.catalog))
            print(f"repaired {found} problem(s); {left} left"
                  + ("; queued videos are indexed again when the service starts" if any(d.kind == "missing" for d in drift) else ""))
            return EXIT_FAILED if left else EXIT_OK
    if not found:
        print(f"consistent: {ready} ready video(s), every one in its shard, nothing else there; no leftover files")
        return EXIT_OK
    print(f"{found} problem(s); `vifusion check --repair` fixes them", file=sys.stderr)
    return EXIT_FAILED
