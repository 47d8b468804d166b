"""Fit the evidence blend's table (vifusion/query/data/evidence.json): per source of a text
query's ranked lists (``ranking.SOURCES``), a logistic regression (raw score, log of the rank
in its list) -> relevant.

Labelled lists come from the real searcher over two corpora, each indexed by real ingest
into a fresh data dir: the real-footage dev set (``benchmarks/_realmedia.py``: 25 everyday
visual queries) and ``benchmarks/multimodal.py``'s talks and demo videos (espeak-ng speech,
slides, photos: spoken, written and visual queries). Every candidate of every list of every
query is one sample (source, raw score, rank, whether it answers the query), so a source's
fit says how often a hit of that score and rank is right.

    .venv/bin/python scripts/fit_evidence.py            # writes the table
    .venv/bin/python scripts/fit_evidence.py --dry-run  # prints the fit only
    .venv/bin/python scripts/fit_evidence.py --samples /tmp/s.json  # collects once, then reuses
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import _realmedia  # noqa: E402
import multimodal  # noqa: E402

from vifusion.config import Config  # noqa: E402
from vifusion.query.ranking import EVIDENCE_FILE, SOURCES  # noqa: E402

TOP_K = 10  # the lists' depth follows top_k as a search's does (50 candidates a list)
RIDGE = 1e-3  # a little L2 on the slopes: a source whose samples separate still gets a finite fit


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-z))


def samples(data_dir: Path, paths: list[Path], queries: list[tuple[str, object]]) -> list[tuple]:
    """Index ``paths`` into ``data_dir``; (source, raw score, rank, relevant) for every candidate
    of every list of each query. ``queries``: (text, answers(video name, start, end) -> bool)."""
    from vifusion.runtime import Runtime

    out = []
    with Runtime(Config(data_dir=data_dir), writer=True) as rt:
        results = rt.indexer.index_files(paths)
        bad = [(r.path, r.error) for r in results if r.status != "ready"]
        if bad:
            raise RuntimeError(f"ingest failed: {bad}")
        names = {r.video_id: Path(r.path).name for r in results}
        for text, answers in queries:
            lists, _ = rt.searcher.ranked_lists(text, TOP_K)
            for source, ranked in lists:
                out += [
                    (source, c.score, rank, answers(names[c.video_id], c.start_s, c.end_s))
                    for rank, c in enumerate(ranked, start=1)
                ]
    return out


def fit(x: np.ndarray, relevant: np.ndarray) -> np.ndarray:
    """The weights w of P(relevant) = sigmoid(x @ w) (``x``'s first column all ones: the
    intercept, not penalised), by Newton's method."""
    w = np.zeros(x.shape[1])
    ridge = RIDGE * np.diag([0.0] + [1.0] * (x.shape[1] - 1))
    for _ in range(100):
        p = sigmoid(x @ w)
        grad = x.T @ (p - relevant) + ridge @ w
        hess = (x * (p * (1 - p))[:, None]).T @ x + ridge
        step = np.linalg.solve(hess + 1e-9 * np.eye(len(w)), grad)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return w


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="print the fit, write nothing")
    ap.add_argument("--talks", type=int, default=len(multimodal.TALKS))
    ap.add_argument(
        "--samples", type=Path, help="the labelled samples: read if there, else written"
    )
    args = ap.parse_args()
    if args.samples is not None and args.samples.exists():
        saved = json.loads(args.samples.read_text())
        got, n_queries = [tuple(s) for s in saved["samples"]], saved["queries"]
    else:
        got, n_queries = collect(args.talks)
        if args.samples is not None:
            args.samples.write_text(json.dumps({"samples": got, "queries": n_queries}))
    fits(got, n_queries, args.talks, args.dry_run)
    return 0


def collect(talks: int) -> tuple[list[tuple], int]:
    """The labelled samples of both corpora (see the module's docstring), and the query count."""
    got: list[tuple] = []
    with tempfile.TemporaryDirectory(prefix="vifusion-fit-evidence-") as tmp:
        paths = _realmedia.build()
        real = [
            (text, lambda v, s, e, a=answers: any(x.holds(v, s, e) for x in a))
            for text, _, answers in _realmedia.QUERIES
        ]
        got += samples(Path(tmp) / "real", paths, real)
        paths, queries = multimodal._corpus(Path(tmp) / "talks", talks)
        talk = [
            (q.text, lambda v, s, e, q=q: v == q.video and s < q.end_s and q.start_s < e)
            for q in queries
        ]
        got += samples(Path(tmp) / "data", paths, talk)
    return got, len(real) + len(talk)


def fits(got: list[tuple], n_queries: int, talks: int, dry_run: bool) -> None:
    """Fit each source on ``got`` and write the table (print it only when ``dry_run``)."""
    table = {}
    for source in SOURCES:
        rows = np.array([(r, k, y) for s, r, k, y in got if s == source], dtype=float)
        raw, relevant = rows[:, 0], rows[:, 2]
        x = np.stack([np.ones_like(raw), raw, np.log(rows[:, 1])], axis=1)
        intercept, slope, log_rank = fit(x, relevant)
        table[source] = {
            "intercept": round(float(intercept), 4),
            "slope": round(float(slope), 4),
            "log_rank": round(float(log_rank), 4),
            "samples": len(rows),
            "relevant": int(relevant.sum()),
            "raw_range": [round(float(raw.min()), 3), round(float(raw.max()), 3)],
        }
        at = "  ".join(
            f"{r:.1f}@{k}->{sigmoid(intercept + slope * r + log_rank * np.log(k)):.3f}"
            for r in (0.2, 0.3, 0.5, 0.7, 1.0)
            for k in (1, 5)
        )
        print(
            f"{source:15} n={len(rows):5} relevant={int(relevant.sum()):4} a={intercept:+.3f} "
            f"b={slope:+.3f} c={log_rank:+.3f}  {at}"
        )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    doc = {
        "how": "scripts/fit_evidence.py: per source, logistic regression (raw score, log rank) "
        "-> relevant "
        "over every candidate of the real searcher's ranked lists (top_k 10: 50 a list) for "
        f"{n_queries} labelled queries: benchmarks/_realmedia.py's dev set and "
        f"benchmarks/multimodal.py's {talks} talks and demo videos",
        "fitted": datetime.date.today().isoformat(),
        "commit": commit,
        "samples": len(got),
        "queries": n_queries,
        "sources": table,
    }
    if dry_run:
        print(json.dumps(doc, indent=1))
    else:
        EVIDENCE_FILE.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {EVIDENCE_FILE.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
