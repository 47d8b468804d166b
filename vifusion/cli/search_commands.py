"""The CLI's commands that read the library: ``search`` (through the running service, or the
data dir read in this process) and ``transcript``."""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from vifusion._files import StorageError
from vifusion.catalog import check_collections
from vifusion.cli.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE, _clock
from vifusion.config import Config
from vifusion.datadir import models_dir
from vifusion.query.ranking import ALIASES, MODALITIES, Moment, bracketed, snippet_fields


def cmd_search_args(cfg: Config, args: argparse.Namespace) -> int:
    """`vifusion search` from its parsed arguments: each checked (one line and exit 2 where
    one is wrong), then ``cmd_search``."""
    given = [x for x in (args.text, args.image, args.clip) if x is not None]
    if len(given) != 1:
        print(
            "vifusion search: give exactly one of TEXT, --image FILE, --clip FILE",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if not 1 <= args.top_k <= 1000:
        print("vifusion search: --top-k must be between 1 and 1000", file=sys.stderr)
        return EXIT_USAGE
    modalities = [
        ALIASES.get(m.strip(), m.strip()) for m in args.modalities.split(",") if m.strip()
    ]
    if not modalities or any(m not in MODALITIES for m in modalities):
        print(
            f"vifusion search: --in takes a comma-separated list of {', '.join(MODALITIES)} (or text for screen); "
            f"got {args.modalities!r}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.text is None and "visual" not in modalities:
        print(
            "vifusion search: an image or a clip searches what is seen: --in must include visual",
            file=sys.stderr,
        )
        return EXIT_USAGE
    languages = [x.strip().lower() for x in args.languages] if args.languages else None
    if languages is not None and not all(re.fullmatch(r"[a-z]{2,3}", x) for x in languages):
        print(
            f"vifusion search: --language takes an ISO 639-1 code (es, fr, ...); got {args.languages}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        collections = None if args.collections is None else check_collections(args.collections)
    except ValueError as e:
        print(f"vifusion search: --collection: {e}", file=sys.stderr)
        return EXIT_USAGE
    return cmd_search(
        cfg,
        args.text,
        args.image,
        args.clip,
        args.top_k,
        args.json,
        modalities,
        args.group_by,
        languages,
        None if collections is None else list(collections),
    )


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
    cfg: Config,
    text: str | None,
    image: Path | None,
    clip: Path | None,
    top_k: int,
    as_json: bool,
    modalities: list[str] | None = None,
    group_by: str = "segment",
    languages: list[str] | None = None,
    collections: list[str] | None = None,
) -> int:
    """Ask the service that serves the data dir, if one runs; else search the data dir in this
    process, reading it (no Ray; a text query loads only the text model, without torch where
    its ONNX export is there). With ``cfg.ray_address`` (``--address``): through Ray, whose
    cluster may hold data this machine does not. ``languages``: only videos in which one of
    them is spoken (as the API's ``languages``); ``collections``: only videos in one of them
    (as the API's ``collections``; None: every one)."""
    modalities = modalities or list(MODALITIES)
    query = _Query(text, image, clip, top_k, modalities, group_by, languages, collections)
    try:
        rows = _ask_service(cfg, query) if cfg.ray_address is None else None
        if rows is None:
            rows = _search_here(cfg, query)
    except _Refused as e:  # by the service: its reason
        print(f"vifusion search: {e}", file=sys.stderr)
        return EXIT_USAGE if e.status < 500 else EXIT_FAILED
    except (ValueError, StorageError) as e:
        print(f"vifusion search: {e}", file=sys.stderr)
        return EXIT_USAGE
    if as_json:
        for row in rows:
            print(json.dumps(row))
    elif not rows:
        print("no results (is anything indexed in this data dir?)")
    else:
        print(f"{'score':>6}  {'time':>15}  {'matched':<20}  video")
        for r in rows:
            span = f"{_clock(r['start_s'])}-{_clock(r['end_s'])}"
            print(
                f"{r['score']:6.3f}  {span:>15}  {','.join(r['matched']):<20}  {r['title']}  ({r['source']})"
            )
            if r["snippet"]:
                said = f"({r['language']}) " if r.get("language") else ""
                print(f"{'':>25}{said}{' '.join(bracketed(r['snippet'], r['highlights']).split())}")
            if r.get("snippet_english"):
                english = bracketed(r["snippet_english"], r["highlights_english"])
                print(f"{'':>25}(en) {' '.join(english.split())}")
    return EXIT_OK


_API_TOP_K = 100  # the most results the API gives in one page


class _Refused(Exception):
    """The service refused the query (``ApiError``, kept apart so that a search without a
    service does not import the HTTP client): its message, and its HTTP ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class _Query:
    """What `vifusion search` was asked: one of text, image and clip, and its options."""

    text: str | None
    image: Path | None
    clip: Path | None
    top_k: int
    modalities: list[str]
    group_by: str
    languages: list[str] | None
    collections: list[str] | None = None


def _ask_service(cfg: Config, q: _Query) -> list[dict] | None:
    """The rows from the live service announced in the data dir (``_running``); None where
    none runs, no key is known, or it cannot be reached (then the data dir is read here).
    _Refused where it refuses the query."""
    from vifusion.cluster.running import api_key, running_url, verify

    if any(p is not None and not Path(p).is_file() for p in (q.image, q.clip)):
        return None  # said here, as without a service
    url = running_url(cfg.data_dir)
    key = api_key(cfg) if url is not None else None
    if key is None:
        return None
    import httpx

    from vifusion.client import ApiError, Client

    options: dict = {"modalities": q.modalities, "group_by": q.group_by}
    if q.languages is not None:
        options["languages"] = q.languages
    if q.collections is not None:
        options["collections"] = q.collections
    found: list[dict] = []
    try:
        with Client(url, key, verify=verify(cfg.data_dir)) as vf:
            while len(found) < q.top_k:  # past one page: follow the cursor
                page = vf.search_page(
                    q.text,
                    image=q.image,
                    clip=q.clip,
                    top_k=min(q.top_k - len(found), _API_TOP_K),
                    **options,
                )
                found += page["results"]
                if page["next_cursor"] is None:
                    break
                options["cursor"] = page["next_cursor"]
    except httpx.TransportError:  # it stopped meanwhile
        return None
    except ApiError as e:
        raise _Refused(e.status, e.message) from None
    sources = _sources(cfg, [m["video_id"] for m in found])
    keys = (
        "video_id",
        "title",
        "start_s",
        "end_s",
        "score",
        "matched",
        "snippet",
        "highlights",
        "snippet_english",
        "highlights_english",
        "language",
    )
    return [{**{k: m.get(k) for k in keys}, "source": sources.get(m["video_id"])} for m in found]


def _sources(cfg: Config, video_ids: list[int]) -> dict[int, str]:
    """Each video's source, from the catalog (the API gives titles, not where a video came from)."""
    import sqlite3

    from vifusion.catalog import open_catalog

    try:
        catalog = open_catalog(cfg, read_only=True)
    except sqlite3.Error:
        return {}
    try:
        return {i: v.source for i, v in catalog.get_videos(video_ids).items()}
    finally:
        catalog.close()


def _search_here(cfg: Config, q: _Query) -> list[dict]:
    """The rows from this process: the data dir read here (``index/local.py``), or through Ray
    where ``cfg.ray_address`` is set. Only ready videos' moments (of ``languages`` where given),
    ``min_relative_score`` applied, as the service does."""
    if cfg.ray_address is not None:
        from vifusion.runtime import Runtime

        with Runtime(cfg) as rt:
            videos = _searched(rt.catalog, q)
            return _rows(cfg, rt.catalog, _find(rt.searcher, q, videos))
    import sqlite3

    from vifusion.catalog import open_catalog
    from vifusion.index.local import LocalShards
    from vifusion.query.searcher import Searcher

    try:
        catalog = open_catalog(cfg, read_only=True)
    except sqlite3.OperationalError:  # nothing was ever indexed here
        return []
    try:
        embedder = _text_embedder(cfg) if q.text is not None else _embedder(cfg)
        searcher = Searcher(cfg, LocalShards(cfg), embedder, catalog)
        return _rows(cfg, catalog, _find(searcher, q, _searched(catalog, q)))
    finally:
        catalog.close()


def _searched(catalog, q: _Query) -> list[int] | None:
    """The ready videos in which one of ``q.languages`` is spoken and that are in one of
    ``q.collections``, for a search's ``videos``, which the shards search alone (None: no
    such condition, every video)."""
    if q.languages is None and q.collections is None:
        return None
    return sorted(catalog.ready_ids(languages=q.languages, collections=q.collections))


def _find(searcher, q: _Query, videos: list[int] | None = None) -> list[Moment]:
    if q.text is not None:
        return searcher.text(q.text, q.top_k, q.group_by, videos, modalities=q.modalities)
    if q.image is not None:
        return searcher.image(_load_image(q.image), q.top_k, q.group_by, videos)
    from vifusion.extract.decode import DecodeError

    try:
        return searcher.clip(q.clip, q.top_k, q.group_by, videos)
    except DecodeError as e:  # a bad clip: a usage error, as any other bad query
        raise ValueError(str(e)) from None


def _rows(cfg: Config, catalog, moments: list[Moment]) -> list[dict]:
    from vifusion.query.ranking import relative_cut

    ready = catalog.ready_ids(sorted({m.video_id for m in moments}))
    moments = relative_cut([m for m in moments if m.video_id in ready], cfg.min_relative_score)
    videos = catalog.get_videos([m.video_id for m in moments])
    return [_result(m, videos.get(m.video_id)) for m in moments]


def _text_embedder(cfg: Config):
    """The query text model without torch (``extract/_text_onnx.py``), from the ONNX export
    that indexing leaves in the model cache; where there is none (nothing indexed on this
    machine yet, or the cache not writable), the torch model, which leaves it for the next."""
    from vifusion.extract._text_onnx import TextEmbedder, onnx_path
    from vifusion.index.model import DEFAULT

    path = onnx_path(models_dir(cfg))
    if path.is_file() and cfg.visual_model == DEFAULT:  # another's text tower needs torch
        return TextEmbedder(path, cfg.query_threads)
    return _embedder(cfg)


def _embedder(cfg: Config):
    """The visual model and the text model, with torch (``backbone.load_backbone``)."""
    import torch

    from vifusion.extract.backbone import load_backbone

    torch.set_num_threads(cfg.query_threads)
    return load_backbone(cfg)


def _result(m: Moment, video) -> dict:
    return {
        "video_id": m.video_id,
        "title": video.title if video else None,
        "source": video.source if video else None,
        "start_s": round(m.start_s, 3),
        "end_s": round(m.end_s, 3),
        "score": round(m.score, 4),
        "matched": m.matched,
        **snippet_fields(m.snippet, m.snippet_english),
        "language": m.language,
    }


def cmd_transcript(cfg: Config, video_id: int, kind: str, vtt: bool) -> int:
    """Print what a video says (or shows written): from the catalog alone, no Ray."""
    from vifusion.catalog import open_catalog
    from vifusion.datadir import has_catalog
    from vifusion.query.webvtt import webvtt

    if not has_catalog(cfg):
        print(
            f"vifusion transcript: no catalog in {cfg.data_dir} (is this the data dir?)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    catalog = open_catalog(cfg)
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
