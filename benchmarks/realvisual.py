"""Everyday-word queries on real footage: how often the right video comes first.

The dev set of ``_realmedia`` (real clips and photos from packages, fetched once into
``~/.cache/vifusion-dev/``; 25 queries labelled by looking) is indexed by real ingest
(``Runtime.indexer``: frames, speech, screen text) twice in one run: before, with the
classes alone (``concept_hypernyms`` 0, the vectors of indexes made before #54), and after,
with their WordNet hypernyms (the default). Each query is searched visual only and over
every modality with each blend (``BLENDS``: rrf, calibrated, evidence). A result is right when its video answers the
query (and, in a long video, its time overlaps the labelled seconds).

Prints the rank of the first right moment per query and way, then R@1, R@5 and MRR (top
10) per way, overall and per kind of query (object, scene, person), the after / before
ratio of R@1, and one JSON line. ``--explain``: for each query some way does not put right
first (after), the top 3 of each ranked list it was blended from, with their raw scores
(which video outranks the right one, and by which list).

    .venv/bin/python benchmarks/realvisual.py [--explain]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _realmedia  # noqa: E402
from _common import arguments, report_head, run_benchmark  # noqa: E402

from vifusion.config import Config  # noqa: E402
from vifusion.query.ranking import BLENDS  # noqa: E402

TOP_K = 10
KINDS = ("object", "scene", "person")


def _rank(found, answers, names: dict[int, str]) -> int | None:
    """The rank (from 1) of the first moment that answers, None if none in ``found`` does."""
    return next(
        (
            i
            for i, m in enumerate(found, start=1)
            if any(a.holds(names[m.video_id], m.start_s, m.end_s) for a in answers)
        ),
        None,
    )


def ranks(
    paths: list[Path], data_dir: Path, hypernyms: float, explain: bool = False
) -> tuple[dict, float]:
    """Index ``paths`` into ``data_dir`` with ``concept_hypernyms`` = ``hypernyms``: each way's
    rank per query (``_realmedia.QUERIES`` order), and the ingest's wall seconds. ``explain``:
    print the lists of each query some way misses (``--explain``)."""
    from vifusion.runtime import Runtime

    with Runtime(Config(data_dir=data_dir, concept_hypernyms=hypernyms), writer=True) as rt:
        t0 = time.perf_counter()
        results = rt.indexer.index_files(paths)
        seconds = time.perf_counter() - t0
        bad = [(r.path, r.error) for r in results if r.status != "ready"]
        if bad:
            raise RuntimeError(f"ingest failed: {bad}")
        names = {r.video_id: Path(r.path).name for r in results}
        searcher = rt.searcher
        out: dict[str, list[int | None]] = {"visual": [], **{b: [] for b in BLENDS}}
        for text, _, answers in _realmedia.QUERIES:
            found = searcher.text(text, TOP_K, group_by="video", modalities=["visual"])
            out["visual"].append(_rank(found, answers, names))
            for blend in BLENDS:
                found = searcher.text(text, TOP_K, group_by="video", blend=blend)
                out[blend].append(_rank(found, answers, names))
            if explain and any(out[way][-1] != 1 for way in out):
                _explain(searcher, text, answers, names, {w: r[-1] for w, r in out.items()})
    return out, seconds


def _explain(searcher, text: str, answers, names: dict[int, str], got: dict) -> None:
    """The top 3 of each list ``text`` is blended from (raw scores), right ones marked *."""
    lists, _ = searcher.ranked_lists(text, TOP_K, group_by="video")
    print(f"{text!r}: " + ", ".join(f"{w} {r or '-'}" for w, r in got.items()))
    for source, ranked in lists:
        top = [
            f"{'*' if any(a.holds(names[c.video_id], c.start_s, c.end_s) for a in answers) else ''}"
            f"{names[c.video_id]}@{c.start_s:.0f}s {c.score:.3f}"
            for c in ranked[:3]
        ]
        print(f"    {source:15} {', '.join(top) or '(none)'}")


def figures(got: list[int | None], kinds: list[str], kind: str | None = None) -> dict:
    """R@1, R@5 and MRR of ``got`` (ranks), over the queries of ``kind`` (None: all)."""
    sel = [r for r, k in zip(got, kinds) if kind is None or k == kind]
    return {
        "r1": round(sum(r == 1 for r in sel) / len(sel), 3),
        "r5": round(sum(r is not None and r <= 5 for r in sel) / len(sel), 3),
        "mrr": round(sum(1 / r for r in sel if r) / len(sel), 3),
    }


def main() -> int:
    ap = arguments(__doc__)
    ap.add_argument("--cache", type=Path, default=_realmedia.CACHE)
    ap.add_argument("--explain", action="store_true", help="each missed query's lists (after)")
    args = ap.parse_args()
    paths = _realmedia.build(args.cache)
    kinds = [k for _, k, _ in _realmedia.QUERIES]
    with tempfile.TemporaryDirectory(prefix="vifusion-realvisual-") as tmp:
        before, s_before = ranks(paths, Path(tmp) / "before", 0.0)
        after, s_after = ranks(paths, Path(tmp) / "after", Config().concept_hypernyms, args.explain)
    show = lambda r: "-" if r is None else str(r)  # noqa: E731
    ways = list(before)
    print(
        f"{len(paths)} videos, {len(kinds)} queries; rank of the first right video (- not in top {TOP_K})"
    )
    print("  " + " ".join(f"{'b:' + w[:5]:>8}" for w in ways) + " " + " ".join(f"{'a:' + w[:5]:>8}" for w in ways) + "  kind    query")  # fmt: skip
    for i, (text, kind, _) in enumerate(_realmedia.QUERIES):
        cells = [show(before[w][i]) for w in ways] + [show(after[w][i]) for w in ways]
        print("  " + " ".join(f"{c:>8}" for c in cells) + f"  {kind:7} {text!r}")
    report = report_head("realvisual", False) | {"queries": len(kinds), "videos": len(paths)}
    for name, got in (("before", before), ("after", after)):
        for way in ways:
            for kind in (None, *KINDS):
                f = figures(got[way], kinds, kind)
                key = f"{name}_{way}" + (f"_{kind}" if kind else "")
                report |= {f"{k}_{key}": v for k, v in f.items()}
                print(f"{key:28} R@1 {f['r1']:.3f}  R@5 {f['r5']:.3f}  MRR {f['mrr']:.3f}")
    for way in ways:
        b, a = report[f"r1_before_{way}"], report[f"r1_after_{way}"]
        report[f"r1_ratio_{way}"] = round(a / b, 3) if b else None
        print(f"R@1 after / before, {way}: {a:.3f} / {b:.3f} = {report[f'r1_ratio_{way}']}")
    report |= {"ingest_s_before": round(s_before, 1), "ingest_s_after": round(s_after, 1)}
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    run_benchmark(main, "realvisual")
