"""The catalog: what videos exist and where each job stands, in SQLite under the data dir;
and what is said and written in them (speech segments, on-screen text spans), with a
keyword index (FTS5, BM25) for the exact words, names and numbers an embedding blurs.

WAL mode with ``synchronous=FULL``: a write that returned is on disk. One connection per
thread (sqlite3 connections must not cross threads).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vifusion._catalog_schema import CatalogTooNew, migrate_sqlite
from vifusion._catalog_words import (
    FUZZY_WEIGHT,
    MAX_FUZZY_WORDS,
    METADATA_KEY,
    SNIPPET_TOKENS,
    TEXT_KINDS,
    check_kind,
    check_metadata_filter,
    checked_rows,
    fuzzy_key,
    letter_pairs,
    max_edits,
    nearest,
    query_words,
)

if TYPE_CHECKING:
    from vifusion.config import Config

__all__ = ["FUZZY_WEIGHT", "JOB_STAGES", "JOB_STATES", "METADATA_KEY", "TEXT_KINDS", "Catalog", "CatalogTooNew",
           "Job", "TextRow", "Video", "max_edits"]

JOB_STATES = ("queued", "decoding", "indexing", "ready", "failed")
# What a running job does: fetching its URL, probing the file, decoding and embedding frames
# (and reading their screen text), transcribing speech, saving (the shards acknowledging it all).
JOB_STAGES = ("fetching", "probing", "frames", "speech", "saving")

# A video's metadata as filters read it: NULL (matching no filter) where SQLite cannot read it
# (NaN, stored before ingest refused it), since one such row would fail every filtered query.
_FILTERABLE = "(CASE WHEN json_valid(metadata) THEN metadata END)"


class CatalogUnreachable(ValueError):
    """The catalog's database server cannot be reached."""


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

    @property
    def media_path(self) -> Path | None:
        """The video file on this machine, if there is one yet (a URL is fetched by its job)."""
        if self.media:
            return Path(self.media)
        return None if "://" in self.source else Path(self.source)


@dataclass(frozen=True)
class TextRow:
    """A speech segment or on-screen text span. From a search, ``score`` is its BM25 score
    (higher = better), ``snippet`` its words around the query's, those marked, and
    ``coverage`` the share of the query's words it holds (0-1); from ``texts_at`` with a
    query, ``snippet`` is the whole text with the query's words marked."""

    video_id: int
    kind: str  # speech | screen
    n: int
    start_s: float
    end_s: float
    text: str
    score: float | None = None
    snippet: str | None = None
    coverage: float | None = None


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
    stage: str | None = None  # one of JOB_STAGES while it runs, the one it failed in; None queued or ready
    warnings: tuple[str, ...] = ()  # what went wrong without failing it (its audio, say), one line each


class Catalog:
    """Videos and jobs. Safe to share between threads of one process."""

    def __init__(self, path: Path, read_only: bool = False) -> None:
        """``read_only``: a reader beside whatever writes the data dir (a search in the command
        line's process): nothing is created or migrated; call only the methods that read.
        sqlite3.OperationalError where there is no catalog at ``path``."""
        self.path = Path(path)
        self.read_only = read_only
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []  # every thread's connection, for close()
        self._all_lock = threading.Lock()
        if read_only:
            self._conn()
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        migrate_sqlite(self.path)

    @staticmethod
    def open(cfg: Config, read_only: bool = False) -> Catalog:
        """The catalog ``cfg`` names: PostgreSQL at ``cfg.catalog_url``, else the SQLite file
        DATA_DIR/catalog.db. Opened for writing, it is migrated to this release's schema."""
        if cfg.catalog_url is None:
            return Catalog(cfg.data_dir / "catalog.db", read_only=read_only)
        from vifusion._catalog_pg import PostgresCatalog

        return PostgresCatalog(cfg.catalog_url, pool_size=cfg.catalog_pool_size, read_only=read_only)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # check_same_thread off only so close() can close it; each thread uses its own.
            if self.read_only:
                conn = _connect_read_only(self.path)
            else:
                conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
            conn.row_factory = sqlite3.Row
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    def add_video(
        self,
        source: str,
        title: str,
        metadata: dict[str, Any] | None = None,
        sha256: str | None = None,
        size_bytes: int | None = None,
        media: Path | None = None,
    ) -> tuple[int, str]:
        """A new video with a queued job; returns (video_id, job_id)."""
        now = time.time()
        job_id = uuid.uuid4().hex
        with self._conn() as c:
            cur = c.execute(
                "INSERT INTO videos (source, title, metadata, sha256, size_bytes, status, created_at, media)"
                " VALUES (?, ?, ?, ?, ?, 'queued', ?, ?)",
                (source, title, json.dumps(metadata or {}), sha256, size_bytes, now,
                 None if media is None else str(media)),
            )
            video_id = int(cur.lastrowid)
            c.execute(
                "INSERT INTO jobs (id, video_id, status, created_at, updated_at) VALUES (?, ?, 'queued', ?, ?)",
                (job_id, video_id, now, now),
            )
        return video_id, job_id

    def set_video_info(self, video_id: int, duration_s: float, fps: float, width: int, height: int) -> None:
        with self._conn() as c:
            c.execute(
                "UPDATE videos SET duration_s=?, fps=?, width=?, height=? WHERE id=?",
                (duration_s, fps, width, height, video_id),
            )

    def set_media(self, video_id: int, media: Path, sha256: str, size_bytes: int) -> None:
        """Record the local file a video's job fetched."""
        with self._conn() as c:
            c.execute(
                "UPDATE videos SET media=?, sha256=?, size_bytes=? WHERE id=?",
                (str(media), sha256, size_bytes, video_id),
            )

    def update_job(
        self,
        job_id: str,
        status: str,
        progress: float | None = None,
        frames_indexed: int | None = None,
        error: str | None = None,
        stage: str | None = None,
        warnings: Sequence[str] | None = None,
    ) -> bool:
        """Move a job (and its video) to ``status``; ready and failed are final. ``stage``
        (one of JOB_STAGES) and ``warnings``: None keeps the job's; queued and ready clear
        the stage.

        Returns False, changing nothing, when the job is gone (its video was deleted)."""
        if status not in JOB_STATES:
            raise ValueError(f"unknown job status {status!r}")
        if stage is not None and stage not in JOB_STAGES:
            raise ValueError(f"unknown job stage {stage!r}")
        now = time.time()
        with self._conn() as c:
            row = c.execute("SELECT video_id, progress, frames_indexed, stage, warnings FROM jobs WHERE id=?",
                            (job_id,)).fetchone()
            if row is None:
                return False
            progress = 1.0 if status == "ready" else (row["progress"] if progress is None else progress)
            frames = row["frames_indexed"] if frames_indexed is None else frames_indexed
            stage = None if status in ("queued", "ready") else (row["stage"] if stage is None else stage)
            noted = row["warnings"] if warnings is None else json.dumps(list(warnings))
            c.execute(
                "UPDATE jobs SET status=?, progress=?, frames_indexed=?, error=?, updated_at=?, stage=?, warnings=?"
                " WHERE id=?",
                (status, progress, frames, error, now, stage, noted, job_id),
            )
            c.execute(
                "UPDATE videos SET status=?, frames_indexed=?, error=? WHERE id=?",
                (status, frames, error, row["video_id"]),
            )
        return True

    def requeue(self, video_id: int, reason: str, if_status: str | None = None) -> str | None:
        """Index a video again: a new queued job (the ingest queue runs it at the next start),
        the reason kept in the video's ``error`` until it is ready. ``if_status``: only a video
        in that status now (checked in the same write). None: no such video (in that status)."""
        now = time.time()
        job_id = uuid.uuid4().hex
        with self._conn() as c:
            if c.execute("UPDATE videos SET status='queued', frames_indexed=0, error=? WHERE id=?"
                         " AND (? IS NULL OR status=?)", (reason, video_id, if_status, if_status)).rowcount == 0:
                return None
            c.execute(
                "INSERT INTO jobs (id, video_id, status, created_at, updated_at) VALUES (?, ?, 'queued', ?, ?)",
                (job_id, video_id, now, now),
            )
        return job_id

    def get_video(self, video_id: int) -> Video | None:
        row = self._conn().execute("SELECT * FROM videos WHERE id=?", (video_id,)).fetchone()
        return _video(row) if row else None

    def get_videos(self, video_ids: list[int]) -> dict[int, Video]:
        if not video_ids:
            return {}
        marks = ",".join("?" * len(video_ids))
        rows = self._conn().execute(f"SELECT * FROM videos WHERE id IN ({marks})", video_ids).fetchall()
        return {r["id"]: _video(r) for r in rows}

    def find_ready(self, sha256: str) -> Video | None:
        """An indexed video with this content, if any (re-runs skip it)."""
        row = self._conn().execute(
            "SELECT * FROM videos WHERE sha256=? AND status='ready' ORDER BY id LIMIT 1", (sha256,)
        ).fetchone()
        return _video(row) if row else None

    def list_videos(self, limit: int = 100, after_id: int = 0) -> list[Video]:
        rows = self._conn().execute(
            "SELECT * FROM videos WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit)
        ).fetchall()
        return [_video(r) for r in rows]

    def ready_ids(self, video_ids: list[int] | None = None, metadata: dict[str, Any] | None = None) -> set[int]:
        """The ready videos among ``video_ids`` (all when None) whose metadata has every
        key -> value of ``metadata`` (equality; keys must match ``METADATA_KEY``)."""
        sql, args = "SELECT id FROM videos WHERE status='ready'", []
        for key, value in (metadata or {}).items():
            check_metadata_filter(key, value)
            # json_type tells 1 from true; json_extract alone would not.
            if isinstance(value, bool):
                sql += f" AND json_type({_FILTERABLE}, ?) = ?"
                args += [f'$."{key}"', "true" if value else "false"]
            else:
                sql += (f" AND json_extract({_FILTERABLE}, ?) IS ?"
                        f" AND json_type({_FILTERABLE}, ?) NOT IN ('true', 'false')")
                args += [f'$."{key}"', value, f'$."{key}"']
        if video_ids is not None:
            if not video_ids:
                return set()
            sql += f" AND id IN ({','.join('?' * len(video_ids))})"
            args += list(video_ids)
        return {r[0] for r in self._conn().execute(sql, args)}

    def jobs_in(self, states: tuple[str, ...]) -> list[Job]:
        """Jobs in any of ``states``, oldest first (the ingest queue)."""
        marks = ",".join("?" * len(states))
        rows = self._conn().execute(
            f"SELECT * FROM jobs WHERE status IN ({marks}) ORDER BY created_at, rowid", states
        ).fetchall()
        return [_job(r) for r in rows]

    def lease_job(self) -> Job | None:
        """Take the oldest queued job: it (and its video) move to ``decoding`` in one write,
        so two takers never get the same job. None: nothing is queued."""
        with self._conn() as c:
            row = c.execute(
                "UPDATE jobs SET status='decoding', error=NULL, updated_at=? WHERE id ="
                " (SELECT id FROM jobs WHERE status='queued' ORDER BY created_at, rowid LIMIT 1) RETURNING *",
                (time.time(),)).fetchone()
            if row is None:
                return None
            c.execute("UPDATE videos SET status='decoding', frames_indexed=?, error=NULL WHERE id=?",
                      (row["frames_indexed"], row["video_id"]))
        return _job(row)

    def counts(self) -> dict[str, int]:
        """Videos per status."""
        return {r[0]: r[1] for r in self._conn().execute("SELECT status, count(*) FROM videos GROUP BY status")}

    def get_job(self, job_id: str) -> Job | None:
        row = self._conn().execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        return _job(row) if row else None

    def latest_jobs(self, video_ids: list[int]) -> dict[int, Job]:
        """Each video's newest job (a retry's, say), by video id; videos without one are left out."""
        if not video_ids:
            return {}
        marks = ",".join("?" * len(video_ids))
        rows = self._conn().execute(
            f"SELECT * FROM jobs WHERE video_id IN ({marks}) ORDER BY created_at, rowid", video_ids
        ).fetchall()
        return {r["video_id"]: _job(r) for r in rows}  # the newest last, so it wins

    def delete_video(self, video_id: int) -> bool:
        with self._conn() as c:
            c.execute("DELETE FROM texts WHERE video_id=?", (video_id,))
            c.execute("DELETE FROM jobs WHERE video_id=?", (video_id,))
            return c.execute("DELETE FROM videos WHERE id=?", (video_id,)).rowcount > 0

    # -- speech and screen text ------------------------------------------------------

    def put_texts(self, video_id: int, kind: str, rows: Sequence[tuple[float, float, str]]) -> int:
        """Replace all of a video's ``kind`` rows ("speech" or "screen") with ``rows``, each
        (start_s, end_s, text), in one transaction: indexing a video again leaves exactly
        its last run's rows. Row i is ``n = i``, the number its vector carries
        (``FusedBatch.of_texts(video_id, kind, 0, ...)`` over the same rows, in order).
        Returns the rows stored."""
        checked = checked_rows(video_id, kind, rows)
        with self._conn() as c:
            c.execute("DELETE FROM texts WHERE video_id=? AND kind=?", (video_id, kind))
            c.executemany("INSERT INTO texts (video_id, kind, n, start_s, end_s, text) VALUES (?, ?, ?, ?, ?, ?)",
                          checked)
        return len(checked)

    def texts(self, video_id: int, kind: str | None = None) -> list[TextRow]:
        """A video's text rows (one kind, or both), in time order: a transcript."""
        sql, args = "SELECT video_id, kind, n, start_s, end_s, text FROM texts WHERE video_id=?", [video_id]
        if kind is not None:
            check_kind(kind)
            sql += " AND kind=?"
            args.append(kind)
        rows = self._conn().execute(sql + " ORDER BY start_s, end_s, kind, n", args).fetchall()
        return [TextRow(**dict(r)) for r in rows]

    def keyword_search(self, query: str, kinds: Iterable[str] = TEXT_KINDS, video_ids: Iterable[int] | None = None,
                       limit: int = 50, marks: tuple[str, str] = ("[", "]"), fuzzy: bool = True) -> list[TextRow]:
        """Text rows holding any of the query's words (stemmed: "budgets" finds "budget"),
        best BM25 first (rows with more of the words, and rarer ones, rank higher), at most
        ``limit``; only ``kinds``, and only ``video_ids`` when given. Each carries its BM25
        score, a snippet with the matched words between ``marks``, and its ``coverage``.

        With ``fuzzy``, a query word that no row holds is looked for by its near spellings
        among the index's words (``max_edits``): a speech model spells a name it does not
        know as it hears it ("Zorblax" written "Lorblax"). A near match counts
        ``FUZZY_WEIGHT`` of an exact one, in the score and in the coverage.

        Any string is a safe query: each whitespace-separated part of it is one quoted FTS5
        phrase (``AC/DC`` is the phrase "AC DC"), so quotes, operators and brackets in it are
        words or nothing, never syntax. A query with no words finds nothing."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        kinds = list(kinds)
        for kind in kinds:
            check_kind(kind)
        words = query_words(query)
        if not words or not kinds:
            return []
        where, args = f"t.kind IN ({','.join('?' * len(kinds))})", list(kinds)
        if video_ids is not None:
            where += " AND t.video_id IN (SELECT value FROM json_each(?))"
            args.append(json.dumps([int(v) for v in video_ids]))
        near = self._near_spellings(words) if fuzzy else {}
        exact = [_phrase(w) for w in words]
        spelt = [_phrase(t) for terms in near.values() for t in terms]
        scores = self._bm25(" OR ".join(exact), where, args, limit)
        if spelt:
            for i, score in self._bm25(" OR ".join(spelt), where, args, limit).items():
                scores[i] = scores.get(i, 0.0) + FUZZY_WEIGHT * score
        if not scores:
            return []
        rows = self._conn().execute(
            "SELECT t.id, t.video_id, t.kind, t.n, t.start_s, t.end_s, t.text,"
            f" snippet(texts_fts, 0, ?, ?, '…', {SNIPPET_TOKENS}) AS snippet"
            " FROM texts_fts JOIN texts t ON t.id = texts_fts.rowid"
            " WHERE texts_fts MATCH ? AND t.id IN (SELECT value FROM json_each(?))",
            (marks[0], marks[1], " OR ".join(exact + spelt), json.dumps(list(scores)))).fetchall()
        coverage = self._coverage(words, near, [r["id"] for r in rows])
        out = [TextRow(r["video_id"], r["kind"], r["n"], r["start_s"], r["end_s"], r["text"], scores[r["id"]],
                       r["snippet"], coverage[r["id"]]) for r in rows]
        out.sort(key=lambda r: (-r.score, r.video_id, r.start_s, r.n))
        return out[:limit]

    def _bm25(self, match: str, where: str, args: list[Any], limit: int) -> dict[int, float]:
        """Text row id -> BM25 score (higher = better) of the ``limit`` best rows for ``match``."""
        sql = ("SELECT t.id, -bm25(texts_fts) FROM texts_fts JOIN texts t ON t.id = texts_fts.rowid"
               f" WHERE texts_fts MATCH ? AND {where} ORDER BY bm25(texts_fts), t.video_id, t.start_s, t.n LIMIT ?")
        return dict(self._conn().execute(sql, [match, *args, int(limit)]).fetchall())

    def _holding(self, match: str, ids: list[int]) -> set[int]:
        """The text rows among ``ids`` that ``match`` finds."""
        return {r[0] for r in self._conn().execute(
            "SELECT rowid FROM texts_fts WHERE texts_fts MATCH ? AND rowid IN (SELECT value FROM json_each(?))",
            (match, json.dumps(ids)))}

    def _coverage(self, words: list[str], near: dict[str, list[str]], ids: list[int]) -> dict[int, float]:
        """Per text row: the share of ``words`` it holds, a near spelling counting FUZZY_WEIGHT."""
        held = dict.fromkeys(ids, 0.0)
        for w in words:
            exact = self._holding(_phrase(w), ids)
            spelt = self._holding(" OR ".join(map(_phrase, near[w])), ids) - exact if near.get(w) else set()
            for i in exact:
                held[i] += 1.0
            for i in spelt:
                held[i] += FUZZY_WEIGHT
        return {i: h / len(words) for i, h in held.items()}

    def _near_spellings(self, words: list[str]) -> dict[str, list[str]]:
        """For each of ``words`` that no row holds and that is letters only (at most
        ``MAX_FUZZY_WORDS`` such words): the index's words (as stemmed there) nearest to it,
        within ``max_edits``, the most common first. Only the nearest: a word one edit away
        is the likelier reading, and the farther ones would mostly be other words.

        A cheap filter runs in SQL first: a word within d edits keeps at least all but 2d of
        the other's distinct letter pairs (an edit breaks at most two), so only index words
        holding that many are measured."""
        c = self._conn()
        c.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.texts_vocab USING fts5vocab(main, texts_fts, row)")
        out: dict[str, list[str]] = {}
        tried = 0
        for w in words:
            if ((fuzzy := fuzzy_key(w)) is None or tried == MAX_FUZZY_WORDS
                    or c.execute("SELECT 1 FROM texts_fts WHERE texts_fts MATCH ? LIMIT 1", (_phrase(w),)).fetchone()):
                continue
            key, d = fuzzy
            tried += 1
            pairs = letter_pairs(key)
            sql = "SELECT term, doc FROM temp.texts_vocab WHERE length(term) BETWEEN ? AND ?"
            args: list[Any] = [len(key) - d, len(key) + d]
            if len(pairs) > 2 * d:
                sql += " AND (" + " + ".join(["(instr(term, ?) > 0)"] * len(pairs)) + ") >= ?"
                args += [*pairs, len(pairs) - 2 * d]
            if found := nearest(key, d, c.execute(sql, args).fetchall()):
                out[w] = found
        return out

    def texts_at(self, keys: Iterable[tuple[int, str, int]], query: str | None = None,
                 marks: tuple[str, str] = ("[", "]")) -> dict[tuple[int, str, int], TextRow]:
        """The text rows named by (video_id, kind, n) keys (those that exist), e.g. a dense
        search's hits; with ``query``, each one's ``snippet`` is its whole text with the
        query's words (as ``keyword_search`` reads them, near spellings included) between
        ``marks``, or the plain text where none occurs in it."""
        keys = list(dict.fromkeys((int(v), k, int(n)) for v, k, n in keys))
        if not keys:
            return {}
        sql = ("SELECT t.id, t.video_id, t.kind, t.n, t.start_s, t.end_s, t.text FROM texts t"
               " JOIN json_each(?) j ON t.video_id = json_extract(j.value, '$[0]')"
               " AND t.kind = json_extract(j.value, '$[1]') AND t.n = json_extract(j.value, '$[2]')")
        c = self._conn()
        found = {r["id"]: r for r in c.execute(sql, (json.dumps(keys),))}
        marked: dict[int, str] = {}
        words = query_words(query) if query is not None else []
        if words and found:
            near = self._near_spellings(words)
            match = " OR ".join([_phrase(w) for w in words] + [_phrase(t) for ts in near.values() for t in ts])
            marked = dict(c.execute(
                "SELECT rowid, highlight(texts_fts, 0, ?, ?) FROM texts_fts"
                " WHERE texts_fts MATCH ? AND rowid IN (SELECT value FROM json_each(?))",
                (marks[0], marks[1], match, json.dumps(list(found)))).fetchall())
        out = {}
        for i, r in found.items():
            row = TextRow(r["video_id"], r["kind"], r["n"], r["start_s"], r["end_s"], r["text"])
            if query is not None:
                row = replace(row, snippet=marked.get(i, row.text))
            out[(row.video_id, row.kind, row.n)] = row
        return out

    def close(self) -> None:
        """Close every thread's connection (threads that use the catalog later reopen)."""
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that reads ``path`` and leaves the data dir as it found it.

    Opened read-write (never created), not ``mode=ro``: a read-only connection to a WAL
    database cannot remove the -wal and -shm files it creates, while the last read-write
    connection to close removes them. (Not ``query_only`` either: keyword search makes a
    temp table.) Where the file or its folder cannot be
    written, ``mode=ro``; where even that cannot open it (no -shm there and none can be
    made), ``immutable``, which is safe then: no writer can be at work in that folder."""
    where = path.resolve().as_uri()
    for mode in ("mode=rw", "mode=ro", "immutable=1"):
        try:
            conn = sqlite3.connect(f"{where}?{mode}", uri=True, timeout=30, check_same_thread=False)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the file
            return conn
        except sqlite3.OperationalError as e:
            if "no such" in str(e) or not path.is_file():
                raise sqlite3.OperationalError(f"no catalog at {path}") from None
            last = e
    raise last


def _phrase(word: str) -> str:
    """``word`` as one quoted FTS5 phrase (a '"' doubled): never syntax."""
    return '"' + word.replace('"', '""') + '"'


def _job(row: sqlite3.Row) -> Job:
    d = dict(row)
    d["warnings"] = tuple(json.loads(d["warnings"]))
    return Job(**d)


def _video(row: sqlite3.Row) -> Video:
    d = dict(row)
    d["metadata"] = json.loads(d["metadata"])
    return Video(**d)
