"""What the catalog stores and answers with, whichever database holds it: a video, a job
and its states, a speech or screen text row."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JOB_STATES = ("queued", "decoding", "indexing", "ready", "failed")
# What a running job does: fetching its URL, probing the file, decoding and embedding frames
# (and reading their screen text), transcribing speech, saving (the shards acknowledging it all).
JOB_STAGES = ("fetching", "probing", "frames", "speech", "saving")


class CatalogUnreachable(ValueError):
    """The catalog's database server cannot be reached."""


class NoCatalog(sqlite3.OperationalError):
    """There is no catalog to read: not a data dir, or nothing was ever added (or, on a
    server, no catalog was ever made there). An OperationalError, as sqlite3 raises for a
    missing file, whichever database: a reader catching that catches this."""


class LeaseLost(RuntimeError):
    """A job's lease was taken over (its holder stopped renewing it in time, and another
    worker runs the job now): the old holder's write is refused, so it can never overwrite
    the new holder's progress or end the job."""


@dataclass(frozen=True)
class Video:
    id: int
    source: str
    title: str
    metadata: dict[str, Any]
    sha256: str | None
    size_bytes: int | None
    duration_s: float | None
    fps: float | None
    width: int | None
    height: int | None
    status: str
    frames_indexed: int
    error: str | None
    created_at: float
    media: str | None  # the local file to decode and serve; None: ``source`` is that file
    language: str | None = None  # the spoken language (ISO 639-1); None: not known
    collection: str = "default"  # the one collection it belongs to (``_collections.py``)

    @property
    def media_path(self) -> Path | None:
        """The video file on this machine, if there is one yet (a URL is fetched by its job)."""
        if self.media:
            return Path(self.media)
        return None if "://" in self.source else Path(self.source)


@dataclass(frozen=True)
class TextRow:
    """A speech segment or on-screen text span, in the language spoken (``language``, ISO
    639-1; None: not known), with its English rendering where it is not English
    (``english``). From a search, ``score`` is its BM25 score (higher = better), ``snippet``
    its words around the query's, those marked, ``snippet_english`` the same of its English
    rendering (None: it has none), and ``coverage`` the share of the query's words it holds
    (0-1); from ``texts_at`` with a query, the snippets are the whole texts with the query's
    words marked."""

    video_id: int
    kind: str  # speech | screen
    n: int
    start_s: float
    end_s: float
    text: str
    score: float | None = None
    snippet: str | None = None
    coverage: float | None = None
    language: str | None = None
    english: str | None = None
    snippet_english: str | None = None


@dataclass(frozen=True)
class Job:
    id: str
    video_id: int
    status: str
    progress: float
    frames_indexed: int
    error: str | None
    created_at: float
    updated_at: float
    stage: str | None = (
        None  # one of JOB_STAGES while it runs, the one it failed in; None queued or ready
    )
    warnings: tuple[
        str, ...
    ] = ()  # what went wrong without failing it (its audio, say), one line each
    # Who runs it ("<worker name>/<incarnation>") and until when (time.time()) unless renewed;
    # None: never leased (queued, or run by `vifusion index`, which leases nothing).
    lease_owner: str | None = None
    lease_until: float | None = None
    # Times ingest workers took it since it was queued (``Catalog.lease_job``); 0 again when
    # it goes back in the queue.
    attempts: int = 0


# A job's columns, in Job's order (PostgreSQL's jobs has ``seq`` besides).
JOB_COLUMNS = (
    "id, video_id, status, progress, frames_indexed, error, created_at, updated_at, stage,"
    " warnings, lease_owner, lease_until, attempts"
)


def job_from_row(row: dict[str, Any]) -> Job:
    return Job(**{**row, "warnings": tuple(json.loads(row["warnings"]))})


def video_from_row(row: dict[str, Any]) -> Video:
    return Video(**{**row, "metadata": json.loads(row["metadata"])})


def job_update(
    row: Any,
    status: str,
    progress: float | None,
    frames_indexed: int | None,
    stage: str | None,
    warnings: Iterable[str] | None,
) -> tuple[float, int, str | None, str]:
    """A job's (progress, frames_indexed, stage, warnings as JSON) after an update to
    ``status``, from its stored ``row``: what is not given is kept, a ready job is at 1.0, and
    a queued or ready one has no stage. Both catalogs write these."""
    done = 1.0 if status == "ready" else (row["progress"] if progress is None else progress)
    frames = row["frames_indexed"] if frames_indexed is None else frames_indexed
    if status in ("queued", "ready"):
        stage = None
    elif stage is None:
        stage = row["stage"]
    noted = row["warnings"] if warnings is None else json.dumps(list(warnings))
    return done, frames, stage, noted
