"""Speech and on-screen text: what the two models cost on one core, and how well one text
query finds what is seen, said and written.

1. ``asr_rtf``: compute seconds per second of audio for ``Transcriber.transcribe`` (tiny.en,
   int8, one thread, VAD on, word times on) over a ~10 s espeak-ng clip, decoded beforehand
   (the decode is not counted). Compute seconds: this process's CPU time, so other load on
   the host does not inflate it; the wall-clock figure is printed beside it.
2. ``ocr_fps``: frames per CPU second for ``ScreenReader.read`` (RapidOCR, one thread) on a
   640x360 slide of three lines.
3. Retrieval. A corpus made here, not the tests': talks (``_talks.write_talk``, espeak-ng
   speech, slides in DejaVu Sans), each saying two phrases and showing two slides, plus the
   demo's videos of photos; indexed by real ingest (speech, screen text, frames). Queries a
   user would type, each with one right moment: each phrase only said and each only written
   asked twice, in some of its words and in other words (``_meaning``), and the demo's
   visual queries ("a cat"...). A result is right when its video is the query's and its time overlaps the phrase's (or
   the slide's, or the scene's). Reported for the same index and queries:
   ``r1_all`` (R@1 over all modalities, default blend), ``r1_visual_only`` (the same
   queries, visual search alone), ``r1_<blend>`` / ``mrr_<blend>`` for each of ``BLENDS``
   (rrf, calibrated, evidence; MRR over the top 10), and ``r1_<kind>_<blend>`` /
   ``mrr_<kind>_<blend>`` per kind of query. ``fusion`` names the default blend
   (``vifusion.query.searcher.BLEND``). ``p50_ms_<blend>``: each blend's median search time
   over the same queries (the default against rrf, which calibrates nothing: what the blend
   adds to a search).

4. ``ingest_ratio``: the same corpus indexed again into a fresh data dir with speech and
   screen text off, in the same run: sampled frames per second of wall time with every
   modality over visual only (each run includes loading its extractor's models).

Each cost is the median of ``--repeats`` runs after one warm-up. The last line is one JSON
object.

Run (from the repository root):

    .venv/bin/python benchmarks/multimodal.py           # 5 repeats, 10 talks (86 queries)
    .venv/bin/python benchmarks/multimodal.py --quick   # 2 repeats, 2 talks (22 queries): under a minute
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    arguments,
    index_timed,
    machine,
    rank_of,
    run_benchmark,
    talks_missing,
)

from vifusion.config import Config  # noqa: E402
from vifusion.extract.audio import read_audio  # noqa: E402
from vifusion.extract.screentext import ScreenReader  # noqa: E402
from vifusion.extract.speech import Transcriber  # noqa: E402
from vifusion.query.ranking import BLENDS  # noqa: E402
from vifusion.samples import talks as _talks  # noqa: E402

SAID = [
    (0.3, "Welcome back. Today we look at how the cache behaves under load."),
    (5.2, "The second chart shows latency for each region in March."),
]
SHOWN = ["Cache latency by region", "p99 under 40 ms in March", "Next: failover drills"]


# Talks: (said at 1 s, said at 11 s, slide over 0-10 s, slide over 10-20 s), and for each
# phrase two queries: in some of its words, then in other words (meaning only). No query word
# of one kind is said or shown in the other kind, and none names what the demo's photos show.
TALKS = [
    (
        "We moved the billing service to the new data centre in Frankfurt last week.",
        "Customer complaints dropped by half after the support team doubled.",
        "Warehouse robots: pilot in Rotterdam",
        "Solar panels on every depot roof by 2027",
        (
            "billing service moved to Frankfurt",
            "fewer complaints after the support team grew",
            "warehouse robots in Rotterdam",
            "solar panels on depot roofs",
        ),
        (
            "invoicing system relocated to Germany",
            "fewer unhappy clients once we hired more helpdesk staff",
            "automated storage trial in the Netherlands",
            "renewable energy on our buildings",
        ),
    ),
    (
        "The orchestra will rehearse the second symphony every Tuesday evening.",
        "Our bakery sells more sourdough bread than croissants on weekends.",
        "Glacier retreat: 40 metres per year",
        "Volunteer hours by district",
        (
            "orchestra rehearsal on Tuesday",
            "sourdough bread sales at the bakery",
            "glacier retreat",
            "volunteer hours per district",
        ),
        (
            "classical music practice each week",
            "which pastries sell best on Saturdays",
            "melting ice in the mountains",
            "unpaid community work per neighbourhood",
        ),
    ),
    (
        "The bridge inspection found rust under the northern cables.",
        "Interns from the design school start their placements in September.",
        "Mobile app downloads doubled in Brazil",
        "Pension fund returns, 2019 to 2024",
        (
            "rust found during the bridge inspection",
            "design school interns in September",
            "app downloads in Brazil",
            "pension fund returns",
        ),
        (
            "corrosion on the suspension structure over the river",
            "students joining us in autumn",
            "smartphone installs in South America",
            "retirement savings performance",
        ),
    ),
    (
        "Please remember to lock the laboratory freezer before you leave.",
        "The football club signed a young goalkeeper from Norway.",
        "Wind turbine maintenance schedule",
        "Elevator repair costs per floor",
        (
            "lock the laboratory freezer",
            "football club signs a goalkeeper from Norway",
            "wind turbine maintenance",
            "elevator repair costs",
        ),
        (
            "secure the cold storage in the lab",
            "new soccer player from Scandinavia",
            "servicing plan for windmills",
            "what fixing the lifts costs",
        ),
    ),
    (
        "Our hospital cut waiting times in the emergency ward by twenty minutes.",
        "The poetry festival moves to the old railway station this summer.",
        "Tomato harvest forecast for Andalusia",
        "Quantum computing reading group",
        (
            "emergency ward waiting times",
            "poetry festival at the railway station",
            "tomato harvest forecast",
            "quantum computing reading group",
        ),
        (
            "patients wait less in casualty",
            "literature event at a former train depot",
            "vegetable crop outlook in southern Spain",
            "book club about qubits",
        ),
    ),
    (
        "The city council approved a new cycling lane along the river.",
        "Our chess team won the regional tournament without losing a game.",
        "Satellite internet coverage map",
        "Museum ticket prices from March",
        (
            "cycling lane along the river",
            "chess tournament win",
            "satellite internet coverage",
            "museum ticket prices",
        ),
        (
            "bike path next to the water",
            "undefeated board game champions",
            "where space broadband reaches",
            "gallery admission fees in spring",
        ),
    ),
    (
        "The printer on the third floor jams whenever someone prints envelopes.",
        "We are hiring two nurses for the night shift in the children's ward.",
        "Ocean shipping delays in the Suez canal",
        "Vegan menu options for the canteen",
        (
            "printer jams on the third floor",
            "hiring night shift nurses",
            "shipping delays in the Suez canal",
            "vegan options in the canteen",
        ),
        (
            "paper stuck in the copier upstairs",
            "paediatric nursing jobs overnight",
            "container vessels held up in Egypt",
            "plant-based food at lunch",
        ),
    ),
    (
        "The vineyard expects a smaller grape harvest because of the late frost.",
        "Our library will stay open until midnight during the exam period.",
        "Electric bus fleet: 120 vehicles",
        "Password rules for staff laptops",
        (
            "smaller grape harvest after frost",
            "library open until midnight",
            "electric bus fleet",
            "password rules for laptops",
        ),
        (
            "cold weather hurts this year's wine",
            "late study hours in the reading rooms",
            "battery powered public transport",
            "computer login security policy",
        ),
    ),
    (
        "The marathon route passes the cathedral and the central market.",
        "Scientists measured record ozone levels over the Antarctic this spring.",
        "Hotel occupancy in Lisbon, August",
        "Dental clinic opening hours",
        (
            "marathon route past the cathedral",
            "ozone levels over Antarctica",
            "hotel occupancy in Lisbon",
            "dental clinic opening hours",
        ),
        (
            "running race course through the old town",
            "south pole atmosphere research",
            "tourist beds filled in Portugal in summer",
            "when can I see the dentist",
        ),
    ),
    (
        "The submarine cable between the islands was repaired on Friday.",
        "Our yoga classes now start at seven in the morning.",
        "Apple orchard irrigation budget",
        "Theatre season: twelve new plays",
        (
            "submarine cable repaired",
            "early morning yoga classes",
            "apple orchard irrigation budget",
            "theatre season new plays",
        ),
        (
            "undersea link fixed at the end of the week",
            "stretching sessions at dawn",
            "watering costs for fruit trees",
            "upcoming stage productions",
        ),
    ),
]
VISUAL = [
    ("a cat", "kitchen.mp4", "chelsea"),
    ("a cup of coffee", "kitchen.mp4", "coffee"),
    ("a rocket", "launch.mp4", "rocket"),
    ("a motorcycle", "street.mp4", "motorcycle"),
    ("an astronaut", "launch.mp4", "astronaut"),
    ("a camera", "street.mp4", "camera"),
]
KINDS = ("spoken", "spoken_meaning", "written", "written_meaning", "visual")
TOP_K = 10


@dataclass(frozen=True)
class Query:
    text: str
    kind: str  # one of KINDS
    video: str  # file name
    start_s: float
    end_s: float


def _corpus(directory: Path, talks: int) -> tuple[list[Path], list[Query]]:
    """The videos (talks, then the demo's) and the queries, each with its right moment."""
    from vifusion.samples import write_demo_set

    paths, queries = [], []
    for i, (said_a, said_b, shown_a, shown_b, words, meanings) in enumerate(TALKS[:talks]):
        talk = _talks.write_talk(
            directory / f"talk{i}.mp4",
            20.0,
            said=[(1.0, said_a), (11.0, said_b)],
            shown=[(0.0, 10.0, [shown_a]), (10.0, 20.0, [shown_b])],
        )
        paths.append(talk.path)
        spans = [(s.start_s, s.end_s) for s in talk.said] + [
            (s.start_s, s.end_s) for s in talk.shown
        ]
        kinds = ("spoken", "spoken", "written", "written")
        for asks, suffix in ((words, ""), (meanings, "_meaning")):
            for ask, kind, (start, end) in zip(asks, kinds, spans):
                queries.append(Query(ask, kind + suffix, talk.path.name, start, end))
    demo = {v.name: v for v in write_demo_set(directory)}
    paths += [v.path for v in demo.values()]
    for text, name, photo in VISUAL:
        scene = demo[name].scene_of(photo)
        queries.append(Query(text, "visual", name, scene.start_s, scene.end_s))
    return paths, queries


def retrieval(talks: int) -> dict:
    """Index the corpus by real ingest and rank every query every way (see the docstring)."""
    from vifusion.query.searcher import BLEND
    from vifusion.runtime import Runtime

    with tempfile.TemporaryDirectory(prefix="vifusion-multimodal-") as tmp:
        paths, queries = _corpus(Path(tmp) / "videos", talks)
        with Runtime(
            Config(data_dir=Path(tmp) / "visual", speech=False, screen_text=False), writer=True
        ) as rt:
            results, seconds = index_timed(rt, paths)
            visual_fps = sum(r.frames for r in results) / seconds
        cfg = Config(data_dir=Path(tmp) / "data")
        with Runtime(cfg, writer=True) as rt:
            results, seconds = index_timed(rt, paths)
            all_fps = sum(r.frames for r in results) / seconds
            ids = {Path(r.path).name: r.video_id for r in results}
            searcher = rt.searcher
            searcher.text("warm-up")
            ranks: dict[str, list[int | None]] = {way: [] for way in (*BLENDS, "visual_only")}
            took: dict[str, list[float]] = {way: [] for way in BLENDS}
            for q in queries:
                for way in BLENDS:
                    t0 = time.perf_counter()
                    found = searcher.text(q.text, TOP_K, blend=way)
                    took[way].append(time.perf_counter() - t0)
                    ranks[way].append(rank_of(found, ids[q.video], q.start_s, q.end_s))
                ranks["visual_only"].append(
                    rank_of(
                        searcher.text(q.text, TOP_K, modalities=["visual"]),
                        ids[q.video],
                        q.start_s,
                        q.end_s,
                    )
                )
            heard = {
                Path(p).name: rt.catalog.texts(ids[Path(p).name], "speech") for p in paths[:talks]
            }

    print(
        f"ingest: {len(paths)} videos ({talks} talks), frames/s visual only {visual_fps:.1f}, every modality "
        f"{all_fps:.1f}: ingest_ratio {all_fps / visual_fps:.2f}"
    )
    print(
        f"retrieval: {len(queries)} queries; rank of the right moment in the top {TOP_K} (- not there)"
    )
    show = lambda r: "-" if r is None else str(r)  # noqa: E731
    ways = (*BLENDS, "visual_only")
    print(f"  {'kind':15} " + " ".join(f"{w[:4]:>4}" for w in ways) + "  query")
    for i, q in enumerate(queries):
        print(
            f"  {q.kind:15} "
            + " ".join(f"{show(ranks[w][i]):>4}" for w in ways)
            + f"  {q.text!r} ({q.video} {q.start_s:.1f}-{q.end_s:.1f} s)"
        )
    for name, rows in heard.items():
        print(f"  tiny.en heard in {name}: " + " | ".join(r.text for r in rows))

    def r1(way: str, kind: str | None = None) -> float:
        got = [r for r, q in zip(ranks[way], queries) if kind is None or q.kind == kind]
        return round(sum(r == 1 for r in got) / len(got), 3)

    def mrr(way: str, kind: str | None = None) -> float:
        got = [r for r, q in zip(ranks[way], queries) if kind is None or q.kind == kind]
        return round(sum(1 / r for r in got if r) / len(got), 3)

    report = {"r1_all": r1(BLEND), "r1_visual_only": r1("visual_only"), "fusion": BLEND}
    for way in BLENDS:
        report |= {f"r1_{way}": r1(way), f"mrr_{way}": mrr(way)}
    for kind in KINDS:
        report |= {f"r1_{kind}_{way}": r1(way, kind) for way in ways}
        report |= {f"mrr_{kind}_{way}": mrr(way, kind) for way in ways}
    p50 = {way: round(statistics.median(took[way]) * 1000, 2) for way in BLENDS}
    report |= {f"p50_ms_{way}": p50[way] for way in BLENDS}
    print(
        "  search p50 ms (one query after another, same index): "
        + ", ".join(f"{way} {p50[way]}" for way in BLENDS)
        + f"; {BLEND} / rrf x{p50[BLEND] / p50['rrf']:.2f} (aim: within 1.1)"
    )
    print(f"  {'R@1 / MRR':15} " + " ".join(f"{w:>19}" for w in ways))
    for kind in (None, *KINDS):
        cells = [f"{r1(w, kind):.3f} / {mrr(w, kind):.3f}" for w in ways]
        print(f"  {kind or 'all':15} " + " ".join(f"{c:>19}" for c in cells))
    return report | {
        "queries": len(queries),
        "talks": talks,
        "ingest_ratio": round(all_fps / visual_fps, 3),
        "fps_all": round(all_fps, 2),
        "fps_visual_only": round(visual_fps, 2),
    }


def _measure(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median (cpu seconds, wall seconds) of one call, after a warm-up call."""
    fn()
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return statistics.median(cpu), statistics.median(wall)


def main() -> int:
    ap = arguments(__doc__, quick="2 repeats instead of 5, 2 talks instead of 10")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--talks", type=int, default=None, help=f"talks in the corpus (1-{len(TALKS)})")
    args = ap.parse_args()
    repeats = args.repeats or (2 if args.quick else 5)
    talks = args.talks or (2 if args.quick else len(TALKS))
    if (why := talks_missing(talks, len(TALKS))) is not None:
        print(f"multimodal: {why}", file=sys.stderr)
        return 2
    cfg = Config(speech_threads=1, ocr_threads=1)

    with tempfile.TemporaryDirectory(prefix="vifusion-multimodal-") as tmp:
        talk = _talks.write_talk(Path(tmp) / "clip.mp4", 10.0, said=SAID)
        start_s, pcm, _ = read_audio(talk.path, cfg.audio_max_s)
    audio_s = len(pcm) / 16_000
    transcriber = Transcriber(cfg, device="cpu")
    heard = " ".join(s.text for s in transcriber.transcribe(pcm, start_s))
    asr_cpu, asr_wall = _measure(  # each run hears the audio afresh (no encoding kept)
        lambda: (transcriber.forget_encodings(), transcriber.transcribe(pcm, start_s)), repeats
    )

    reader = ScreenReader(cfg, device="cpu")
    slide = _talks.slide(SHOWN, size=(640, 360))
    read = [ln.text for ln in reader.read(slide)]
    ocr_cpu, ocr_wall = _measure(lambda: reader.read(slide), repeats)

    print(f"speech: {audio_s:.1f} s of espeak-ng audio; tiny.en heard: {heard!r}")
    print(f"  {asr_cpu:.3f} cpu s ({asr_wall:.3f} wall s) per run: asr_rtf {asr_cpu / audio_s:.3f}")
    print(f"screen text: 640x360 slide; read: {read!r}")
    print(f"  {ocr_cpu:.3f} cpu s ({ocr_wall:.3f} wall s) per frame: ocr_fps {1 / ocr_cpu:.2f}")
    report = retrieval(talks) | {
        "asr_rtf": round(asr_cpu / audio_s, 4),
        "asr_rtf_wall": round(asr_wall / audio_s, 4),
        "ocr_fps": round(1 / ocr_cpu, 3),
        "ocr_fps_wall": round(1 / ocr_wall, 3),
        "audio_s": round(audio_s, 2),
        "repeats": repeats,
        "threads": 1,
        "machine": machine(),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    run_benchmark(main, "multimodal")
