"""The argparse definitions of `vifusion keys`, `hooks` and `collections`: the data dir's
team settings (parser.py builds the rest and dispatches)."""

from __future__ import annotations

import argparse


def add_admin_commands(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add `keys create|list|revoke`, `hooks add|list|remove` and `collections [delete]` to
    ``sub``, each taking ``common``'s options."""

    def command(name: str, **kw: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], **kw)

    keys = sub.add_parser(
        "keys",
        help="API keys with scopes: create, list, revoke",
        description="The data dir's API keys, with or without a running service (every replica "
        "sees a change within a second). Scopes: search (search and read videos), ingest (also "
        "add videos and read jobs), admin (everything: delete, keys). The bootstrap key "
        "(VIFUSION_API_KEY or DATA_DIR/api_key) is an admin key.",
    ).add_subparsers(dest="keys_command", required=True)
    kc = keys.add_parser("create", parents=[common], help="make a key; it is printed once")
    kc.add_argument("--scope", required=True, choices=("search", "ingest", "admin"))
    kc.add_argument("--name", default="", help="what the key is for, as listed")
    kc.add_argument("--expires-in", type=float, metavar="DAYS", help="expire after DAYS days")
    kc.add_argument(
        "--collection",
        dest="collections",
        action="append",
        metavar="NAME",
        help="limit the key to this collection; repeat for several (default: every one)",
    )
    kl = keys.add_parser("list", parents=[common], help="every key (never the key itself)")
    kl.add_argument("--json", action="store_true", help="print a JSON list")
    kr = keys.add_parser("revoke", parents=[common], help="revoke a key by its id")
    kr.add_argument("key_id", metavar="ID")

    hooks = sub.add_parser(
        "hooks",
        help="webhooks: add, list, remove",
        description="URLs sent job.ready, job.failed and video.deleted events, each signed with "
        "the hook's secret (X-ViFusion-Signature), retried for a day until a 2xx; with or "
        "without a running service. A URL follows ingest's rules: a public address unless "
        "allow_private_urls.",
    ).add_subparsers(dest="hooks_command", required=True)
    ha = hooks.add_parser(
        "add", parents=[common], help="register a URL; its secret is printed once"
    )
    ha.add_argument("url", metavar="URL")
    ha.add_argument(
        "--event",
        action="append",
        choices=("job.ready", "job.failed", "video.deleted"),
        help="an event to send (again for more); default: all",
    )
    ha.add_argument("--collection", metavar="NAME", help="only videos in this collection")
    hl = hooks.add_parser("list", parents=[common], help="every hook and its last delivery")
    hl.add_argument("--json", action="store_true", help="print a JSON list")
    hr = hooks.add_parser("remove", parents=[common], help="remove a hook by its id")
    hr.add_argument("hook_id", metavar="ID")

    co = command(
        "collections",
        help="the collections: videos and frames in each; delete one with its videos",
        description="List the data dir's collections (each video is in one; `default` unless "
        "added with --collection), or delete one: every video in it, its vectors and its "
        "stored media, as `vifusion delete` does.",
    )
    co.add_argument("--json", action="store_true", help="print a JSON list")
    co_sub = co.add_subparsers(dest="collections_command")
    co_del = co_sub.add_parser("delete", parents=[common], help="delete a collection's videos")
    co_del.add_argument("name", metavar="NAME")
