"""The relative cut-off (``Config.min_relative_score``): what each fraction drops, and
whether it ever drops the right moment.

A search keeps the moments scoring at least ``fraction`` x its best moment's score
(``vifusion.query.ranking.relative_cut``). The corpus is the multimodal benchmark's
(``multimodal._corpus``: generated talks, each saying two phrases and showing two slides,
plus the demo's videos of photos), indexed by real ingest, and every query has one right
moment (a phrase, a slide, a scene):

- ``text``: the multimodal benchmark's queries (said, written and seen; in the phrase's
  words and in other words), all modalities, the default fusion (calibrated scores);
- ``text_visual``: its queries of what is seen (the demo's), visual alone (cosines);
- ``image``: a frame from the middle of every scene and slide, cropped, mirrored and scaled
  (``demo.distorted_frame``); right: the scene or slide;
- ``clip``: 3 s of every scene and slide at 192x144 (``samples.write_clip``); right: the
  scene or slide.

Each query is asked for the top 10 (the API's default ``top_k``). For each kind and each
fraction: ``kept`` (moments per query), ``noise_dropped`` (the share of moments that are not
the right one which the cut removes), ``recall`` (queries whose right moment is still
listed, over those where it was listed uncut: the cut never reorders, so R@1 cannot change)
and ``lost`` (queries whose right moment the cut removed). ``min_ratio``: the lowest score
of a right moment listed below the top as a share of the top score: fractions up to it
lose nothing on this corpus.

Run (from the repository root; about two minutes of CPU, most of it ingest):

    .venv/bin/python benchmarks/cutoff.py             # 2 talks (multimodal.py --quick's corpus)
    .venv/bin/python benchmarks/cutoff.py --talks 10  # the full corpus

The last line is one JSON object.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import arguments, machine, run_benchmark, talks_missing  # noqa: E402
from multimodal import TALKS, _corpus  # noqa: E402

from vifusion.config import Config  # noqa: E402
from vifusion.query.ranking import relative_cut  # noqa: E402

FRACTIONS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
TOP_K = 10
KINDS = ("text", "text_visual", "image", "clip")


@dataclass(frozen=True)
class Asked:
    """One query's ranked answer: each moment's score, and which moments are right."""

    kind: str
    label: str
    scores: list[float]
    right: list[bool]


def _spans(paths: list[Path], talks: int) -> list[tuple[Path, float, float, str]]:
    """Every slide of the talks and every scene of the demo's videos: (video, start, end, name)."""
    from vifusion.samples import DEMO_SET

    out = []
    for path in paths[:talks]:  # a talk shows its first slide over 0-10 s, its second over 10-20 s
        out += [
            (path, 0.0, 10.0, f"{path.stem} slide 1"),
            (path, 10.0, 20.0, f"{path.stem} slide 2"),
        ]
    for path in paths[talks:]:  # write_demo_set: 4 s a scene
        out += [
            (path, 4.0 * i, 4.0 * (i + 1), f"{path.stem} {photo}")
            for i, photo in enumerate(DEMO_SET[path.name])
        ]
    return out


def _ask(rt, ids: dict[str, int], queries, spans, work: Path) -> list[Asked]:
    """Every query of every kind, ranked as a search ranks it before the cut."""
    from vifusion.cli.demo import distorted_frame
    from vifusion.samples import SampleVideo, write_clip

    searcher = rt.searcher
    searcher.text("warm-up")
    asked: list[Asked] = []

    def record(kind: str, label: str, found, video: str, start: float, end: float) -> None:
        right = [m.video_id == ids[video] and m.start_s < end and start < m.end_s for m in found]
        asked.append(Asked(kind, label, [m.score for m in found], right))

    for q in queries:
        record("text", q.text, searcher.text(q.text, TOP_K), q.video, q.start_s, q.end_s)
        if q.kind == "visual":
            record(
                "text_visual",
                q.text,
                searcher.text(q.text, TOP_K, modalities=["visual"]),
                q.video,
                q.start_s,
                q.end_s,
            )
    for i, (path, start, end, name) in enumerate(spans):
        mid = (start + end) / 2
        video = SampleVideo(path, path.name, ())
        record(
            "image", name, searcher.image(distorted_frame(video, mid), TOP_K), path.name, start, end
        )
        clip = write_clip(path, work / f"clip{i}.mp4", start + 0.5, start + 3.5, (192, 144))
        record("clip", name, searcher.clip(clip, TOP_K), path.name, start, end)
    return asked


def _table(asked: list[Asked]) -> dict:
    """Per kind: ``min_ratio`` and, per fraction, kept / noise_dropped / recall / lost."""
    out = {}
    for kind in KINDS:
        mine = [a for a in asked if a.kind == kind]
        ratios = [
            a.scores[a.right.index(True)] / a.scores[0]
            for a in mine
            if any(a.right) and not a.right[0] and a.scores[0] > 0
        ]
        noise = sum(not ok for a in mine for ok in a.right)
        listed = sum(any(a.right) for a in mine)
        rows = []
        for f in FRACTIONS:
            kept = kept_noise = recalled = 0
            lost = []
            for a in mine:
                n = len(relative_cut([_Scored(s) for s in a.scores], f))
                kept += n
                kept_noise += sum(not ok for ok in a.right[:n])
                recalled += any(a.right[:n])
                if any(a.right) and not any(a.right[:n]):
                    lost.append(a.label)
            rows.append(
                {
                    "fraction": f,
                    "kept": round(kept / len(mine), 2),
                    "noise_dropped": round(1 - kept_noise / noise, 3) if noise else 0.0,
                    "recall": round(recalled / listed, 3) if listed else 1.0,
                    "lost": lost,
                }
            )
        out[kind] = {
            "queries": len(mine),
            "right_first": sum(a.right[0] for a in mine if a.right),
            "min_ratio": round(min(ratios), 3) if ratios else None,
            "rows": rows,
        }
    return out


@dataclass(frozen=True)
class _Scored:
    score: float


def main() -> int:
    ap = arguments(__doc__)
    ap.add_argument("--talks", type=int, default=2, help=f"talks in the corpus (1-{len(TALKS)})")
    args = ap.parse_args()
    if (why := talks_missing(args.talks, len(TALKS))) is not None:
        print(f"cutoff: {why}", file=sys.stderr)
        return 2
    from vifusion.runtime import Runtime

    with tempfile.TemporaryDirectory(prefix="vifusion-cutoff-") as tmp:
        paths, queries = _corpus(Path(tmp) / "videos", args.talks)
        spans = _spans(paths, args.talks)
        with Runtime(Config(data_dir=Path(tmp) / "data"), writer=True) as rt:
            results = rt.indexer.index_files(paths)
            bad = [(r.path, r.error) for r in results if r.status != "ready"]
            if bad:
                raise RuntimeError(f"ingest failed: {bad}")
            ids = {Path(r.path).name: r.video_id for r in results}
            asked = _ask(rt, ids, queries, spans, Path(tmp))
    table = _table(asked)
    for a in asked:
        marks = (
            " ".join(
                f"{s / a.scores[0]:.2f}{'*' if ok else ''}" for s, ok in zip(a.scores, a.right)
            )
            if a.scores and a.scores[0] > 0
            else "-"
        )
        print(f"  {a.kind:11} {a.label[:40]:40} top {a.scores[0] if a.scores else 0:.3f}: {marks}")
    print("score / top of each moment, * the right one")
    print(f"{'kind':11} {'fraction':>8} {'kept':>5} {'noise dropped':>13} {'recall':>6}  lost")
    for kind, t in table.items():
        for r in t["rows"]:
            print(
                f"{kind:11} {r['fraction']:8.1f} {r['kept']:5.2f} {r['noise_dropped']:13.1%} {r['recall']:6.3f}  "
                f"{', '.join(r['lost'])}"
            )
        print(
            f"{kind:11} {t['queries']} queries, right moment first {t['right_first']}, "
            f"lowest right moment below the top at {t['min_ratio']} of the top score"
        )
    print(json.dumps({"talks": args.talks, "top_k": TOP_K, "kinds": table, "machine": machine()}))
    return 0


if __name__ == "__main__":
    run_benchmark(main, "cutoff")
