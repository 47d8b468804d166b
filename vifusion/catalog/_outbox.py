"""Webhooks in the catalog: the registered hooks, and the outbox of events and their
deliveries, whichever database holds it.

An event (``HOOK_EVENTS``) is written by ``emit`` on the connection of the transaction that
makes the change it tells of (a job's end in ``update_job`` and ``lease_job``, a video's delete
in ``delete_video``), so a change that committed always has its event, and one rolled back
none. It is written only where a hook wants it: one delivery row per matching hook (its event
type, its collection or every one), so a catalog without hooks keeps no outbox.

A delivery is ``pending`` until a worker (vifusion/hooks/delivery.py) records it ``delivered``
(a 2xx) or ``failed`` (still refused after the retry window). A worker takes due deliveries
under a lease (``claim_deliveries``): any number of workers on one catalog never send the same
attempt twice, and a worker that dies mid-send leaves its deliveries to the next taker once the
lease runs out. The hook's secret signs what is sent, so it is stored as it is (unlike a key's,
it cannot be a digest); it is shown once, when made, and never listed.
"""

from __future__ import annotations

import datetime
import json
import secrets
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from vifusion.catalog._database import Database

HOOK_EVENTS = ("job.ready", "job.failed", "video.deleted")
_HOOK_COLUMNS = "id, url, events, collection, created_at, secret"


@dataclass(frozen=True)
class Hook:
    """One registered webhook, with how its deliveries stand."""

    id: str
    url: str
    events: tuple[str, ...]
    collection: str | None  # None: every collection
    created_at: float
    secret: str = field(repr=False, compare=False)
    pending: int = 0  # deliveries not yet delivered nor given up
    last_at: float | None = None  # the last attempt's time; None: none yet
    last_status: int | None = None  # its HTTP status (None: no answer)
    last_error: str | None = None  # why it failed (None: delivered)
    last_attempts: int = 0  # attempts its delivery has taken so far
    last_state: str | None = None  # pending, delivered or failed


@dataclass(frozen=True)
class Delivery:
    """One event to send to one hook, as a worker takes it."""

    event_id: str
    event_type: str
    event_at: float  # when the event was written: the retry window runs from here
    body: str  # the JSON sent, as stored
    hook_id: str
    url: str
    secret: str = field(repr=False)
    attempts: int = 0  # attempts made before this one


def _utc(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat().replace("+00:00", "Z")


def emit(c: Any, kind: str, collection: str | None, data: dict[str, Any]) -> None:
    """Write event ``kind`` about a video in ``collection`` (with ``data``) to the outbox, on
    ``c``, the connection of the caller's transaction: one delivery per hook that wants it,
    nothing where none does."""
    hooks = c.execute(
        "SELECT id FROM webhooks WHERE events LIKE ? AND (collection IS NULL OR collection=?)",
        (f'%"{kind}"%', collection),
    ).fetchall()
    if not hooks:
        return
    now, event_id = time.time(), uuid.uuid4().hex
    body = json.dumps(
        {"id": event_id, "type": kind, "created_at": _utc(now), "data": data},
        separators=(",", ":"),
    )
    c.execute(
        "INSERT INTO hook_events (id, type, created_at, body) VALUES (?, ?, ?, ?)",
        (event_id, kind, now, body),
    )
    c.executemany(
        "INSERT INTO hook_deliveries (event_id, hook_id, status, next_at)"
        " VALUES (?, ?, 'pending', ?)",
        [(event_id, h["id"], now) for h in hooks],
    )


def emit_job_end(c: Any, job_id: str, video_id: int, status: str, error: str | None) -> None:
    """``job.ready`` or ``job.failed`` for a job that just ended, inside its transaction."""
    video = c.execute("SELECT * FROM videos WHERE id=?", (video_id,)).fetchone()
    if video is None:
        return
    collection = video.get("collection", "default")
    emit(
        c,
        f"job.{status}",
        collection,
        {
            "job_id": job_id,
            "video_id": video_id,
            "status": status,
            "error": error,
            "collection": collection,
            "title": video["title"],
            "source": video["source"],
        },
    )


def emit_video_deleted(c: Any, video: dict[str, Any]) -> None:
    """``video.deleted`` for the row ``video`` (as it was before the delete), inside the
    delete's transaction."""
    collection = video.get("collection", "default")
    emit(
        c,
        "video.deleted",
        collection,
        {
            "video_id": video["id"],
            "status": video["status"],
            "error": video["error"],
            "collection": collection,
            "title": video["title"],
            "source": video["source"],
        },
    )


def _hook(row: dict[str, Any], last: dict[str, Any] | None, pending: int) -> Hook:
    return Hook(
        id=row["id"],
        url=row["url"],
        events=tuple(json.loads(row["events"])),
        collection=row["collection"],
        created_at=row["created_at"],
        secret=row["secret"],
        pending=pending,
        last_at=None if last is None else last["last_at"],
        last_status=None if last is None else last["last_status"],
        last_error=None if last is None else last["last_error"],
        last_attempts=0 if last is None else last["attempts"],
        last_state=None if last is None else last["status"],
    )


class Outbox(Database):
    """The webhook methods of ``Catalog``."""

    def create_hook(
        self, url: str, events: Sequence[str] = HOOK_EVENTS, collection: str | None = None
    ) -> Hook:
        """Register ``url`` for ``events`` about videos in ``collection`` (None: every one);
        the hook with its secret, which no later call lists. The URL is checked by the caller
        (vifusion/hooks/events.py: ingest's rules)."""
        unknown = sorted(set(events) - set(HOOK_EVENTS))
        if unknown or not events:
            raise ValueError(
                f"events must be some of {', '.join(HOOK_EVENTS)}; got {', '.join(unknown) or 'none'}"
            )
        hook = Hook(
            uuid.uuid4().hex[:12],
            url,
            tuple(e for e in HOOK_EVENTS if e in events),
            collection,
            time.time(),
            "whsec_" + secrets.token_urlsafe(32),
        )
        self._write(
            f"INSERT INTO webhooks ({_HOOK_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
            (
                hook.id,
                url,
                json.dumps(hook.events),
                collection,
                hook.created_at,
                hook.secret,
            ),
        )
        return hook

    def hooks(self) -> list[Hook]:
        """Every hook, oldest first, each with its pending count and its last attempt."""
        found = []
        for row in self._rows(f"SELECT {_HOOK_COLUMNS} FROM webhooks ORDER BY created_at, id"):
            last = self._row(
                "SELECT last_at, last_status, last_error, attempts, status FROM hook_deliveries"
                " WHERE hook_id=? AND last_at IS NOT NULL ORDER BY last_at DESC LIMIT 1",
                (row["id"],),
            )
            pending = self._row(
                "SELECT count(*) AS n FROM hook_deliveries WHERE hook_id=? AND status='pending'",
                (row["id"],),
            )
            found.append(_hook(row, last, pending["n"]))
        return found

    def delete_hook(self, hook_id: str) -> bool:
        """Unregister a hook, dropping its deliveries still pending; False: no such hook."""
        with self._transaction() as c:
            c.execute("DELETE FROM hook_deliveries WHERE hook_id=?", (hook_id,))
            return c.execute("DELETE FROM webhooks WHERE id=?", (hook_id,)).rowcount > 0

    def claim_deliveries(self, lease_s: float, limit: int) -> list[Delivery]:
        """Take up to ``limit`` pending deliveries that are due and not held, oldest first,
        each held ``lease_s`` (a second worker passes over them meanwhile)."""
        now = time.time()
        with self._transaction() as c:
            due = c.execute(
                "SELECT event_id, hook_id FROM hook_deliveries WHERE status='pending'"
                " AND next_at<=? AND (lease_until IS NULL OR lease_until<?)"
                " ORDER BY next_at LIMIT ?" + self.dialect.take,
                (now, now, limit),
            ).fetchall()
            c.executemany(
                "UPDATE hook_deliveries SET lease_until=? WHERE event_id=? AND hook_id=?",
                [(now + lease_s, d["event_id"], d["hook_id"]) for d in due],
            )
            taken = []
            for d in due:
                row = c.execute(
                    "SELECT e.id, e.type, e.created_at, e.body, h.id AS hook_id, h.url, h.secret,"
                    " d.attempts FROM hook_deliveries d JOIN hook_events e ON e.id=d.event_id"
                    " JOIN webhooks h ON h.id=d.hook_id WHERE d.event_id=? AND d.hook_id=?",
                    (d["event_id"], d["hook_id"]),
                ).fetchone()
                if row is not None:
                    taken.append(
                        Delivery(
                            row["id"],
                            row["type"],
                            row["created_at"],
                            row["body"],
                            row["hook_id"],
                            row["url"],
                            row["secret"],
                            row["attempts"],
                        )
                    )
        return taken

    def record_attempt(
        self,
        d: Delivery,
        state: str,
        http_status: int | None,
        error: str | None,
        next_at: float | None = None,
    ) -> None:
        """What one attempt of ``d`` came to: ``state`` delivered, pending (again at
        ``next_at``) or failed (given up); its HTTP status and error (None: none)."""
        if state not in ("delivered", "pending", "failed"):
            raise ValueError(f"unknown delivery state {state!r}")
        now = time.time()
        self._write(
            "UPDATE hook_deliveries SET status=?, attempts=attempts+1, last_at=?,"
            " last_status=?, last_error=?, next_at=?, lease_until=NULL"
            " WHERE event_id=? AND hook_id=?",
            (
                state,
                now,
                http_status,
                None if error is None else error[:500],
                now if next_at is None else next_at,
                d.event_id,
                d.hook_id,
            ),
        )

    def prune_outbox(self, older_than_s: float) -> int:
        """Forget deliveries ended over ``older_than_s`` ago (delivered or failed), and the
        events left with none; how many deliveries."""
        cut = time.time() - older_than_s
        with self._transaction() as c:
            n = c.execute(
                "DELETE FROM hook_deliveries WHERE status<>'pending' AND last_at<?", (cut,)
            ).rowcount
            c.execute(
                "DELETE FROM hook_events WHERE created_at<? AND NOT EXISTS"
                " (SELECT 1 FROM hook_deliveries d WHERE d.event_id=hook_events.id)",
                (cut,),
            )
        return n
