"""Fit the evidence blend's table (vifusion/query/data/evidence.json): per source of a text
query's ranked lists (``ranking.SOURCES``), a logistic regression raw score -> relevant.

Labelled lists come from the real searcher over two corpora, each indexed by real ingest
into a fresh data dir: the real-footage dev set (``benchmarks/_realmedia.py``: 25 everyday
visual queries) and ``benchmarks/multimodal.py``'s talks and demo videos (espeak-ng speech,
slides, photos: spoken, written and visual queries). Every candidate of every list of every
query is one sample (source, raw score, whether it answers the query), so a source's fit
says how often a hit of that score is right, whatever its rank in its own list.

    .venv/bin/python scripts/fit_evidence.py            # writes the table
    .venv/bin/python scripts/fit_evidence.py --dry-run  # prints the fit only
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
RIDGE = 1e-3  # a little L2 on the slope: a source whose samples separate still gets a finite fit


def samples(data_dir: Path, paths: list[Path], queries: list[tuple[str, object]]) -> list[tuple]:
    """Index ``paths`` into ``data_dir``; (source, raw score, relevant) for every candidate
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
                    (source, c.score, answers(names[c.video_id], c.start_s, c.end_s))
                    for c in ranked
                ]
    return out


def fit(raw: np.ndarray, relevant: np.ndarray) -> tuple[float, float]:
    """(intercept, slope) of P(relevant) = sigmoid(intercept + slope * raw), by Newton's method."""
    x = np.stack([np.ones_like(raw), raw], axis=1)
    w = np.zeros(2)
    for _ in range(100):
        p = 1 / (1 + np.exp(-(x @ w)))
        grad = x.T @ (p - relevant) + RIDGE * np.array([0.0, w[1]])
        hess = (x * (p * (1 - p))[:, None]).T @ x + RIDGE * np.diag([0.0, 1.0])
        step = np.linalg.solve(hess + 1e-9 * np.eye(2), grad)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return float(w[0]), float(w[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="print the fit, write nothing")
    ap.add_argument("--talks", type=int, default=len(multimodal.TALKS))
    args = ap.parse_args()
    got: list[tuple] = []
    with tempfile.TemporaryDirectory(prefix="vifusion-fit-evidence-") as tmp:
        paths = _realmedia.build()
        real = [
            (text, lambda v, s, e, a=answers: any(x.holds(v, s, e) for x in a))
            for text, _, answers in _realmedia.QUERIES
        ]
        got += samples(Path(tmp) / "real", paths, real)
        paths, queries = multimodal._corpus(Path(tmp) / "talks", args.talks)
        talk = [
            (q.text, lambda v, s, e, q=q: v == q.video and s < q.end_s and q.start_s < e)
            for q in queries
        ]
        got += samples(Path(tmp) / "data", paths, talk)
        n_queries = len(real) + len(talk)
    table = {}
    for source in SOURCES:
        rows = [(r, y) for s, r, y in got if s == source]
        raw = np.array([r for r, _ in rows], dtype=float)
        relevant = np.array([y for _, y in rows], dtype=float)
        intercept, slope = fit(raw, relevant)
        table[source] = {
            "intercept": round(intercept, 4),
            "slope": round(slope, 4),
            "samples": len(rows),
            "relevant": int(relevant.sum()),
            "raw_range": [round(float(raw.min()), 3), round(float(raw.max()), 3)],
        }
        at = "  ".join(
            f"{r:.2f}->{1 / (1 + np.exp(-(intercept + slope * r))):.3f}"
            for r in (0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0)
        )
        print(
            f"{source:15} n={len(rows):5} relevant={int(relevant.sum()):4} "
            f"a={intercept:+.3f} b={slope:+.3f}  {at}"
        )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    doc = {
        "how": "scripts/fit_evidence.py: per source, logistic regression raw score -> relevant "
        "over every candidate of the real searcher's ranked lists (top_k 10: 50 a list) for "
        f"{n_queries} labelled queries: benchmarks/_realmedia.py's dev set and "
        f"benchmarks/multimodal.py's {args.talks} talks and demo videos",
        "fitted": datetime.date.today().isoformat(),
        "commit": commit,
        "samples": len(got),
        "queries": n_queries,
        "sources": table,
    }
    if args.dry_run:
        print(json.dumps(doc, indent=1))
    else:
        EVIDENCE_FILE.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {EVIDENCE_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
