"""`vifusion`: index videos, search them, serve them, or run the demo.

Exit codes: 0 success; 1 some inputs failed (each listed with its reason); 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from vifusion.catalog import JOB_STATES, CatalogUnreachable, NoCatalog
from vifusion.cli._admin_parsers import add_admin_commands
from vifusion.cli.commands import EXIT_USAGE
from vifusion.config import Config
from vifusion.index.model import ModelMismatch, with_index_model
from vifusion.query.ranking import MODALITIES


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vifusion", description="Index video and find moments in it.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--data-dir", type=Path, help="where the catalog and indexes live (default ./vifusion-data)"
    )
    common.add_argument(
        "--address", help="Ray cluster to join ('auto' or host:port); default: a local Ray"
    )
    common.add_argument("--config", type=Path, help="JSON file of config values")
    sub = p.add_subparsers(dest="command", required=True)

    def command(name: str, **kw: str) -> argparse.ArgumentParser:
        """A subcommand (``help``, ``description``), with the options every command takes."""
        return sub.add_parser(name, parents=[common], **kw)

    ix = command(
        "index",
        help="index video files, folders or list files",
        description="Index videos: files, folders (searched recursively) or list files (.txt / "
        ".list, one path per line). A video whose content is already indexed is skipped, so a "
        "re-run resumes; a video that fails is reported and the rest go on. On a cluster: "
        "ray job submit -- vifusion index --address auto PATH...",
    )
    ix.add_argument("paths", nargs="+", type=Path, metavar="PATH_OR_LISTFILE")
    ix.add_argument("--sample-fps", type=float, help="frames kept per second (default 1)")
    ix.add_argument("--max-frames", type=int, help="cap on frames per video")
    ix.add_argument("--quiet", action="store_true", help="no progress bar")
    ix.add_argument(
        "--collection", default="default", help="the collection they go in (default: default)"
    )

    se = command(
        "search",
        help="search by text, image or clip",
        description="Find moments. Words search what is seen (visual), said (speech) and written "
        "on screen (screen); each result names what matched and shows the words, the query's "
        "between [ ]. An image or a clip searches what is seen. Asks the running `vifusion "
        "serve` of the data dir if there is one, else reads the data dir in this process; "
        "with --address, searches through Ray (--address local: a Ray started for it).",
    )
    se.add_argument("text", nargs="?", help="what to look for, in words")
    se.add_argument("--image", type=Path, help="an example image")
    se.add_argument("--clip", type=Path, help="an example video clip")
    se.add_argument(
        "--in",
        dest="modalities",
        default=",".join(MODALITIES),
        metavar="MODALITIES",
        help=f"comma-separated, of {', '.join(MODALITIES)} (default: all)",
    )
    se.add_argument(
        "--language",
        dest="languages",
        action="append",
        metavar="LANG",
        help="only videos in which this language is spoken (ISO 639-1: es, fr, ...); "
        "repeat for several",
    )
    se.add_argument(
        "--collection",
        dest="collections",
        action="append",
        metavar="NAME",
        help="only videos in this collection; repeat for several (default: every one)",
    )
    se.add_argument("--top-k", type=int, default=10)
    se.add_argument(
        "--group-by",
        choices=("segment", "video", "frame"),
        default="segment",
        help="segment: moments (default); video: each video's best moment; frame: single frames",
    )
    se.add_argument("--json", action="store_true", help="print JSON, one object per result")

    tr = command("transcript", help="what a video says (or shows written on screen)")
    tr.add_argument("video_id", type=int, metavar="VIDEO_ID")
    tr.add_argument(
        "--kind",
        choices=("speech", "screen", "all"),
        default="speech",
        help="speech (default), screen text, or both",
    )
    tr.add_argument("--vtt", action="store_true", help="print WebVTT subtitles")

    sv = command("serve", help="run the HTTP service")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument(
        "--ingest-root",
        type=Path,
        action="append",
        metavar="DIR",
        help="a folder file:// uris may name (repeat for more); default: none",
    )

    ck = command(
        "check",
        help="do the catalog and the shards agree? any leftover files? (--repair fixes both)",
    )
    ck.add_argument(
        "--repair",
        action="store_true",
        help="delete stray vectors, queue lost videos again, remove leftover media and temp files",
    )

    ls = command(
        "list",
        help="the videos: id, status, duration, frames, title, source",
        description="List the videos of the data dir, read from its catalog (a running service "
        "is not disturbed); a failed one with its reason.",
    )
    ls.add_argument("--status", choices=JOB_STATES, help="only videos in this status")
    ls.add_argument("--json", action="store_true", help="print JSON, one object per video")

    dl = command(
        "delete",
        help="delete videos: vectors, catalog entry, stored media",
        description="Delete videos: through the service that serves the data dir if one runs, "
        "else in this process (refused while another process writes to the data dir). A file "
        "indexed in place stays where it is; an upload or a download the data dir stored is removed.",
    )
    dl.add_argument("video_ids", nargs="+", type=int, metavar="VIDEO_ID")

    ri = command(
        "reindex",
        help="embed the library again with another visual model, then switch to it",
        description="Embed every ready video again with the visual model (--visual-model, or "
        "visual_model in the config: 'default' or 'open_clip:<architecture>:<weights path>') "
        "into a new shard set, from the stored media and the catalog's words; searches keep "
        "answering from the old vectors meanwhile, then the index switches and the old set is "
        "removed. Refused while a service or another writer uses the data dir.",
    )
    ri.add_argument("--visual-model", help="the model to embed with (default: visual_model)")
    ri.add_argument("--quiet", action="store_true", help="no progress bar")

    st = command(
        "status",
        help="jobs, videos by status, each shard's rows, log and last snapshot, the service",
    )
    st.add_argument("--json", action="store_true", help="print one JSON object")

    add_admin_commands(sub, common)

    pl = command(
        "plan",
        help="where to run extractors and shards: placement by simulation",
        description="Measure each stage on each node type, simulate ingest for candidate placements "
        "(extractors per node, where the shards go, fusion sizes) and print the fastest, the runner-up "
        "and the even spread. CLUSTER.yaml: a `ray up` config (links and CPU shares from its node "
        "types' vifusion-* labels or --link); or --address auto: the running cluster.",
    )
    pl.add_argument("cluster_yaml", nargs="?", type=Path, metavar="CLUSTER.yaml")
    pl.add_argument(
        "--link",
        action="append",
        default=[],
        metavar="TYPE=RATE[/RTT_MS]",
        help="a node type's link, e.g. shard_mem=20mbit/10 (repeat for more)",
    )
    pl.add_argument(
        "--apply",
        action="store_true",
        help="write the plan to DATA_DIR/plan.json, where the runtime reads it",
    )
    # What the plan is for; each overrides its config key (plan_video_mbps, ...).
    for flag, kind, metavar, help_ in (
        (
            "--video-mbps",
            float,
            "MBIT_S",
            "your videos' bitrate: an extractor off the head receives each file over its link "
            "(default 4, config plan_video_mbps; 0 ignores the transfer)",
        ),
        (
            "--batch",
            int,
            "N",
            "plan for a batch of N videos: ranked by the time to index them all, the last "
            "one included (default: a steady stream without end; config plan_batch_videos)",
        ),
        ("--video-s", float, "SECONDS", "your videos' length (default 600, config plan_video_s)"),
        (
            "--queries-per-s",
            float,
            "Q",
            "text searches a second to serve while indexing: the plan leaves them their CPU "
            "and predicts their p50 (default 0, config plan_queries_per_s)",
        ),
        (
            "--index-rows",
            int,
            "N",
            "rows the index holds when searched (default 1,000,000, config plan_index_rows)",
        ),
        (
            "--query-p50-s",
            float,
            "SECONDS",
            "the searches' p50 a placement must keep to rank first (default 0.5, config "
            "plan_query_p50_s; 0: frames/s alone)",
        ),
    ):
        pl.add_argument(flag, type=kind, metavar=metavar, help=help_)
    pl.add_argument(
        "--recalibrate", action="store_true", help="measure the stages again (cached per node type)"
    )
    pl.add_argument("--json", action="store_true", help="print one JSON object")
    command("demo", help="make sample videos, index them, run example queries")
    for name, help_, description in (
        (
            "backup",
            "copy the data dir (catalog, shards, uploads, keys) while the service runs",
            "Back up the data dir into DEST (new or empty): a consistent copy of the catalog, "
            "every shard's snapshot and log, the stored media, the keys and the applied plan, "
            "with DEST/manifest.json of every file's size and SHA-256. Safe while a service "
            "runs: everything acknowledged before it began is in it.",
        ),
        (
            "restore",
            "restore a backup into a new, empty data dir",
            "Restore the backup in DEST into --data-dir (new or empty): every file is checked "
            "against the manifest first, and a damaged backup is refused naming the file.",
        ),
    ):
        bk = command(name, help=help_, description=description)
        bk.add_argument("dest", type=Path, metavar="DEST")
        bk.add_argument(
            "--node",
            metavar="NAME",
            help="a cluster node's part: DEST/NAME (one folder per node in one DEST)",
        )
    return p


def _config(args: argparse.Namespace) -> Config:
    return Config.load(
        file=args.config,
        data_dir=args.data_dir,
        ray_address=args.address,
        sample_fps=getattr(args, "sample_fps", None),
        max_frames=getattr(args, "max_frames", None),
        visual_model=getattr(args, "visual_model", None),
        ingest_roots=tuple(args.ingest_root) if getattr(args, "ingest_root", None) else None,
        plan_video_mbps=getattr(args, "video_mbps", None),
        plan_batch_videos=getattr(args, "batch", None),
        plan_video_s=getattr(args, "video_s", None),
        plan_queries_per_s=getattr(args, "queries_per_s", None),
        plan_index_rows=getattr(args, "index_rows", None),
        plan_query_p50_s=getattr(args, "query_p50_s", None),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        cfg = _config(args)
    except Exception as e:  # pydantic says which value is wrong
        print(f"vifusion: bad configuration: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.command not in ("reindex", "serve"):  # those take visual_model as the target
            cfg = with_index_model(cfg)  # the model that made the index's vectors
        return _dispatch(args, cfg)
    except (CatalogUnreachable, NoCatalog, ModelMismatch) as e:
        # a cluster's PostgreSQL down or misnamed, no catalog where one is read, an index
        # whose model cannot be loaded: one line, no traceback
        print(f"vifusion {args.command}: {e}", file=sys.stderr)
        return EXIT_USAGE


def _dispatch(args: argparse.Namespace, cfg: Config) -> int:
    if args.command == "index":
        from vifusion.catalog import check_collection
        from vifusion.cli.commands import cmd_index

        try:
            check_collection(args.collection)
        except ValueError as e:
            print(f"vifusion index: --collection: {e}", file=sys.stderr)
            return EXIT_USAGE
        return cmd_index(cfg, args.paths, quiet=args.quiet, collection=args.collection)
    if args.command == "search":
        from vifusion.cli.search_commands import cmd_search_args

        return cmd_search_args(cfg, args)
    if args.command == "transcript":
        from vifusion.cli.search_commands import cmd_transcript

        return cmd_transcript(cfg, args.video_id, args.kind, args.vtt)
    if args.command == "serve":
        from vifusion.cli.commands import cmd_serve

        return cmd_serve(cfg, args.host, args.port)
    if args.command == "check":
        from vifusion.cli.check import cmd_check

        return cmd_check(cfg, args.repair)
    if args.command == "list":
        from vifusion.cli.commands import cmd_list

        return cmd_list(cfg, args.status, args.json)
    if args.command == "delete":
        from vifusion.cli.commands import cmd_delete

        return cmd_delete(cfg, args.video_ids)
    if args.command == "keys":
        from vifusion.cli import keys

        if args.keys_command == "create":
            return keys.cmd_keys_create(
                cfg, args.scope, args.name, args.expires_in, args.collections
            )
        if args.keys_command == "list":
            return keys.cmd_keys_list(cfg, args.json)
        return keys.cmd_keys_revoke(cfg, args.key_id)
    if args.command == "hooks":
        from vifusion.cli import hooks as webhooks

        if args.hooks_command == "add":
            return webhooks.cmd_hooks_add(cfg, args.url, args.event, args.collection)
        if args.hooks_command == "list":
            return webhooks.cmd_hooks_list(cfg, args.json)
        return webhooks.cmd_hooks_remove(cfg, args.hook_id)
    if args.command == "collections":
        from vifusion.cli import collections

        if args.collections_command == "delete":
            return collections.cmd_collections_delete(cfg, args.name)
        return collections.cmd_collections(cfg, args.json)
    if args.command == "reindex":
        from vifusion.cli.commands import cmd_reindex

        return cmd_reindex(cfg, args.quiet)
    if args.command == "status":
        from vifusion.cli.commands import cmd_status

        return cmd_status(cfg, args.json)
    if args.command == "plan":
        from vifusion.cli.commands import cmd_plan

        return cmd_plan(cfg, args.cluster_yaml, args.link, args.apply, args.json, args.recalibrate)
    if args.command in ("backup", "restore"):
        from vifusion.cli.backup import cmd_backup
        from vifusion.cli.restore import cmd_restore

        run = cmd_backup if args.command == "backup" else cmd_restore
        return run(cfg, args.dest, args.node)
    if args.command == "demo":
        from vifusion.cli.demo import run_demo

        return run_demo(cfg)
    return EXIT_USAGE
