"""Speech in many languages (#55): is the language named right, does a query find the moment in
the talk's own language and in English, and what does speech cost ingest.

1. A corpus made here: one talk of 20 s per language (es, fr, de, it, pt, ru, and English as
   a control), spoken by espeak-ng in that language's voice (``vifusion/samples/talks.py``
   ``VOICES``), two sentences each (at 1 s and 11 s), every sentence about something no other
   talk mentions; written as real files (mp4, webm, mkv in turn) and indexed through the real
   product (``Runtime``'s indexer: decode, Whisper base detection and transcription, the
   translate task, tiny.en for English, embeddings, shards, catalog), defaults otherwise.
2. ``detected``: the language the catalog records for each talk against the one spoken.
3. Retrieval: per sentence, a query in the talk's language (a few of its words, typed without
   accents) and one in English (the same meaning in other words); a result is right when it is
   the talk's and overlaps the sentence. R@1 over the top ``TOP_K`` of ``Searcher.text``
   (every modality, the default blend), no language filter, per language and over all;
   English queries also through FreeDict's dictionaries (``_dictionaries.py``), in the same
   library (``+dict``, ``*_dictionaries``).
4. ``ingest_ratio``: the same talks indexed in a fresh data dir with speech off (visual only)
   and with speech on (on-screen text off in both, so the ratio is speech's): sampled frames
   per wall second, each run's model loads included, speech on over off. A 20-s talk pays
   every cost of a video's first words (English first, the language's candidates) for 20
   frames; ``ingest_ratio_long`` does the same on talks of ``LONG_S`` (es, de, it; not in
   ``--quick``), their sentences said one after another, as in a lecture.
5. English on tiny.en (the default, ``speech_english_tiny``) against base: seconds to
   transcribe the English talk (``Transcriber.transcribe_file``, median of ``--repeats``
   after a warm-up), and what each heard.
6. The library's languages named (not in ``--quick``): the talks written again with each
   sentence's words on a slide, indexed with screen text on and ``speech_languages`` naming
   the corpus's seven: the languages named and the same queries over speech alone
   (``among_*``); the English queries over screen text alone, with and without dictionaries
   (``slides_*``: es, fr, de, it, pt; the reader reads Latin letters).
7. Real voices (not in ``--quick``): per language, a talk of the words people recorded for
   KDE's ktuberling (``_realspeech.py``: the parts and things of a face, 1.2 s apart, ~20 s),
   indexed into the same library after the timed runs. ``real_detected``: the language
   named; each word is asked in the talk's language and in English (its name, "nose"), as a
   search filtered to the talk's language (every language says "nose"; the filter is the
   product's, on the detected language, so a misnamed talk is missed); English words with
   and without the dictionaries, and their p50 search times.

The last line is one JSON object.

Run (from the repository root):

    .venv/bin/python benchmarks/multilingual.py           # 7 talks, 3 repeats, long talks: ~8 min quiet
    .venv/bin/python benchmarks/multilingual.py --quick   # es, fr and en, 1 repeat
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import arguments, index_timed, rank_of, report_head, run_benchmark  # noqa: E402
from _dictionaries import fetch as fetch_dictionaries  # noqa: E402
from _realspeech import recordings  # noqa: E402

from vifusion.config import Config  # noqa: E402
from vifusion.samples import talks as _talks  # noqa: E402

TOP_K = 10
SUFFIXES = (".mp4", ".webm", ".mkv")

# Per language: two sentences, each with a query in that language (typed without accents, as
# a user might) and one in English (its meaning in other words). No two sentences share a topic.
TALKS: dict[str, tuple[tuple[str, str, str], tuple[str, str, str]]] = {
    "es": (
        (
            "La biblioteca municipal abre los domingos por la mañana desde este mes.",
            "biblioteca abre los domingos",
            "the public library now opens on Sunday mornings",
        ),
        (
            "Los pescadores del puerto venden sardinas frescas cada tarde.",
            "sardinas frescas del puerto",
            "fishermen sell fresh sardines at the harbour",
        ),
    ),
    "fr": (
        (
            "Le musée des beaux-arts présente une nouvelle exposition de peintures impressionnistes.",
            "exposition de peintures impressionnistes",
            "an exhibition of impressionist paintings at the art museum",
        ),
        (
            "Les agriculteurs de la région ont récolté beaucoup de pommes cette année.",
            "agriculteurs recolte de pommes",
            "farmers picked a lot of apples this year",
        ),
    ),
    "de": (
        (
            "Die Feuerwehr hat gestern Abend einen Brand in der Schule gelöscht.",
            "Feuerwehr Brand in der Schule",
            "firefighters put out a fire at the school last night",
        ),
        (
            "Im Zoo wurde letzte Woche ein kleiner Elefant geboren.",
            "kleiner Elefant im Zoo geboren",
            "a baby elephant was born at the zoo",
        ),
    ),
    "it": (
        (
            "Il ristorante sulla piazza prepara la migliore pizza della città.",
            "migliore pizza della citta",
            "the restaurant on the square makes the best pizza in town",
        ),
        (
            "Il treno per Roma è in ritardo di mezz'ora a causa della neve.",
            "treno per Roma in ritardo",
            "the train to Rome is half an hour late because of snow",
        ),
    ),
    "pt": (
        (
            "O hospital da cidade contratou vinte enfermeiros novos.",
            "hospital contratou enfermeiros",
            "the city hospital hired twenty new nurses",
        ),
        (
            "A praia fica cheia de turistas durante o verão.",
            "praia cheia de turistas",
            "the beach is crowded with tourists in summer",
        ),
    ),
    "ru": (
        (
            "Наш университет построил новую лабораторию для физиков.",
            "университет построил новую лабораторию",
            "the university built a new laboratory for physicists",
        ),
        (
            "Зимой озеро замерзает, и дети катаются на коньках.",
            "дети катаются на коньках",
            "children go ice skating on the frozen lake in winter",
        ),
    ),
    "en": (
        (
            "The bakery on the corner sells fresh bread every morning.",
            "bakery fresh bread",
            "",  # English already: its own query is the English one
        ),
        (
            "Our company will open a second office in Toronto next spring.",
            "second office in Toronto",
            "",
        ),
    ),
}
QUICK = ("es", "fr", "en")


@dataclass(frozen=True)
class Query:
    text: str
    asked_in: str  # "own": the talk's language; "english": an English query of a foreign talk
    language: str  # the talk's
    video: str  # file name
    start_s: float
    end_s: float


def corpus(
    directory: Path, languages: list[str], slides: bool = False
) -> tuple[list[Path], list[Query]]:
    """The talks as real files, and every query with its right moment. ``slides``: each
    sentence's words also shown over its half of the talk (``slide_spans``), as its
    own-language query reads, capitalised."""
    paths, queries = [], []
    for i, lang in enumerate(languages):
        (first, own_a, _), (second, own_b, _) = TALKS[lang]
        shown = [(a, b, [own.capitalize()]) for (a, b), own in zip(SLIDES, (own_a, own_b))]
        talk = _talks.write_talk(
            directory / f"{lang}{SUFFIXES[i % len(SUFFIXES)]}",
            20.0,
            said=[(1.0, first), (11.0, second)],
            shown=shown if slides else (),
            fps=5,
            language=lang,
        )
        paths.append(talk.path)
        for (_, own, english), said in zip(TALKS[lang], talk.said):
            for text, asked_in in ((own, "own"), (english, "english")):
                if text:
                    queries.append(
                        Query(text, asked_in, lang, talk.path.name, said.start_s, said.end_s)
                    )
    return paths, queries


SLIDES = ((0.0, 10.0), (10.0, 20.0))  # each sentence's slide, over its half of the talk
READ = ("es", "fr", "de", "it", "pt")  # the slides the reader reads (Latin letters)

LONG = ("es", "de", "it")  # the languages base names right in espeak's voices
LONG_S = 120.0  # a lecture's length: a video's first-words costs spread over its windows
SAID_EVERY_S = 7.5  # a sentence of 4-6 s at espeak's pace, then a breath: ~70% voiced


def long_corpus(directory: Path, languages: list[str]) -> list[Path]:
    """Per language, a talk of ``LONG_S`` saying its sentences in turn, as a real file."""
    paths = []
    for i, lang in enumerate(languages):
        sentences = [said for said, *_ in TALKS[lang]] + list(_talks.SENTENCES[lang])
        said = [
            (0.5 + k * SAID_EVERY_S, sentences[k % len(sentences)])
            for k in range(int(LONG_S / SAID_EVERY_S))
        ]
        talk = _talks.write_talk(
            directory / f"long-{lang}{SUFFIXES[i % len(SUFFIXES)]}",
            LONG_S,
            said=said,
            fps=5,
            language=lang,
        )
        paths.append(talk.path)
    return paths


def ingest_fps(directory: Path, paths: list[Path], speech: bool) -> float:
    """Sampled frames per wall second indexing ``paths`` into a fresh data dir, speech on or
    off (on-screen text off: the difference is speech's)."""
    from vifusion.runtime import Runtime

    cfg = Config(data_dir=directory, speech=speech, screen_text=False, dictionaries=())
    with Runtime(cfg, writer=True) as rt:
        results, seconds = index_timed(rt, paths)
    return sum(r.frames for r in results) / seconds


REAL_GAP_S = 1.2  # silence between recorded words: over the 1 s pause that splits segments


def real_corpus(directory: Path, languages: list[str]) -> tuple[list[Path], list[Query]]:
    """Per language, its recorded words as one talk (a real file), and for each word a query
    in the language and one in English, each with the word's moment."""
    paths, queries = [], []
    for i, lang in enumerate(languages):
        words, at = [], 1.0
        for r in recordings(lang, _talks.AUDIO_RATE):
            words.append((at, r))
            at += len(r.samples) / _talks.AUDIO_RATE + REAL_GAP_S
        talk = _talks.write_talk(
            directory / f"real-{lang}{SUFFIXES[i % len(SUFFIXES)]}",
            at,
            recorded=[(t, r.samples, r.written) for t, r in words],
            fps=5,
        )
        paths.append(talk.path)
        for (_, r), said in zip(words, talk.said):
            for text, asked_in in ((r.written, "own"), (r.english, "english")):
                queries.append(
                    Query(text, asked_in, lang, talk.path.name, said.start_s, said.end_s)
                )
    return paths, queries


def main() -> int:
    ap = arguments(__doc__, quick=f"{', '.join(QUICK)} only, 1 repeat")
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args()
    if not _talks.have_espeak():
        print(
            "multilingual: espeak-ng is not installed (apt-get install espeak-ng)", file=sys.stderr
        )
        return 2
    languages = list(QUICK if args.quick else TALKS)
    foreign = [x for x in languages if x != "en"]
    real: dict = {}
    repeats = args.repeats or (1 if args.quick else 3)
    from vifusion.runtime import Runtime

    with tempfile.TemporaryDirectory(prefix="vifusion-multilingual-") as tmp:
        tmp = Path(tmp)
        paths, queries = corpus(tmp / "videos", languages)
        fps: dict[str, float] = {}
        for way, speech in (("visual_only", False), ("speech", True)):
            cfg = Config(data_dir=tmp / way, speech=speech, screen_text=False, dictionaries=())
            with Runtime(cfg, writer=True) as rt:
                results, seconds = index_timed(rt, paths)
                fps[way] = sum(r.frames for r in results) / seconds
                if not speech:
                    continue
                ids = {Path(r.path).name: r.video_id for r in results}
                detected = {p.stem: rt.catalog.get_video(ids[p.name]).language for p in paths}
                heard = {p.stem: rt.catalog.texts(ids[p.name], "speech") for p in paths}
                rt.searcher.text("warm-up")
                lexical = with_dictionaries(rt)
                ranks, ranks_dict = (
                    [
                        rank_of(s.text(q.text, TOP_K), ids[q.video], q.start_s, q.end_s)
                        for q in queries
                    ]
                    for s in (rt.searcher, lexical)
                )
                if not args.quick:
                    real = real_voices(rt, lexical, tmp / "real", foreign)
        english = paths[languages.index("en")]
        english_times = english_tiny_vs_base(tmp / "speech", english, repeats)
        long_fps, among = {}, {}
        if not args.quick:
            among = named_among(tmp / "among", tuple(languages))
            long_paths = long_corpus(tmp / "long", [x for x in LONG if x in languages])
            for way, speech in (("visual_only", False), ("speech", True)):
                long_fps[way] = ingest_fps(tmp / f"long-{way}", long_paths, speech)

    def r1(asked_in: str, lang: str | None = None, ranks=ranks) -> float | None:
        got = [
            r
            for r, q in zip(ranks, queries)
            if q.asked_in == asked_in and (lang is None or q.language == lang)
        ]
        return round(sum(r == 1 for r in got) / len(got), 3) if got else None

    print(f"corpus: {len(paths)} talks of 20 s ({', '.join(languages)}), {len(queries)} queries")
    print(
        f"{'lang':5} {'detected':9} {'R@1 own':>8} {'R@1 en':>7} {'+dict':>6}  "
        "heard (English rendering)"
    )
    for lang in languages:
        rows = heard[lang]
        said = " | ".join(r.text + (f" ({r.english})" if r.english else "") for r in rows)
        en, en_dict = r1("english", lang), r1("english", lang, ranks_dict)
        print(
            f"{lang:5} {detected[lang] or '-':9} {r1('own', lang):>8.3f} "
            f"{'-' if en is None else f'{en:.3f}':>7} "
            f"{'-' if en_dict is None else f'{en_dict:.3f}':>6}  {said}"
        )
    show = lambda r: "-" if r is None else str(r)  # noqa: E731
    print(f"ranks of the right moment in the top {TOP_K} (- not there; with dictionaries):")
    for q, r, rd in zip(queries, ranks, ranks_dict):
        print(f"  {q.language} {q.asked_in:7} {show(r):>3} {show(rd):>3}  {q.text!r}")
    detected_right = sum(detected[x] == x for x in languages) / len(languages)
    detected_right_foreign = sum(detected[x] == x for x in foreign) / len(foreign)
    r1_own_foreign = [
        r for r, q in zip(ranks, queries) if q.asked_in == "own" and q.language != "en"
    ]
    r1_english = [r for r, q in zip(ranks, queries) if q.asked_in == "english"]
    r1_english_dict = [r for r, q in zip(ranks_dict, queries) if q.asked_in == "english"]
    report = report_head("multilingual", args.quick) | {
        "languages": languages,
        "talks": len(paths),
        "queries": len(queries),
        "detected": detected,
        "detected_right": round(detected_right, 3),
        "detected_right_foreign": round(detected_right_foreign, 3),
        "r1_own_language": round(sum(r == 1 for r in r1_own_foreign) / len(r1_own_foreign), 3),
        "r1_english_query": round(sum(r == 1 for r in r1_english) / len(r1_english), 3),
        "r1_english_query_dictionaries": round(
            sum(r == 1 for r in r1_english_dict) / len(r1_english_dict), 3
        ),
        "r1_own_by_language": {x: r1("own", x) for x in languages},
        "r1_english_by_language": {x: r1("english", x) for x in foreign},
        "fps_visual_only": round(fps["visual_only"], 2),
        "fps_speech": round(fps["speech"], 2),
        "ingest_ratio": round(fps["speech"] / fps["visual_only"], 3),
        **(
            {
                "long_talks": f"{len(LONG)} x {LONG_S:.0f} s",
                "fps_visual_only_long": round(long_fps["visual_only"], 2),
                "fps_speech_long": round(long_fps["speech"], 2),
                "ingest_ratio_long": round(long_fps["speech"] / long_fps["visual_only"], 3),
            }
            if long_fps
            else {}
        ),
        **english_times,
        **among,
        "repeats": repeats,
        **real,
    }
    print(
        f"over {len(foreign)} languages besides English: detected right {detected_right_foreign:.3f}, "
        f"R@1 own-language query {report['r1_own_language']:.3f}, "
        f"R@1 English query {report['r1_english_query']:.3f}, "
        f"with dictionaries {report['r1_english_query_dictionaries']:.3f}"
    )
    print(
        f"ingest frames/s: visual only {fps['visual_only']:.2f}, speech on {fps['speech']:.2f}: "
        f"ratio {report['ingest_ratio']:.2f}"
    )
    if among:
        print(
            f"with the library's languages named ({', '.join(languages)}): detected right "
            f"{among['among_detected_right_foreign']:.3f}, R@1 own-language query "
            f"{among['among_r1_own_language']:.3f}, R@1 English query "
            f"{among['among_r1_english_query']:.3f}, with dictionaries "
            f"{among['among_r1_english_query_dictionaries']:.3f} (speech alone); English query "
            f"for a slide ({', '.join(READ)}) {among['slides_r1_english_query']:.3f}, with "
            f"dictionaries {among['slides_r1_english_query_dictionaries']:.3f}"
        )
    if long_fps:
        print(
            f"ingest frames/s on {report['long_talks']} talks ({', '.join(LONG)}): visual only "
            f"{long_fps['visual_only']:.2f}, speech on {long_fps['speech']:.2f}: "
            f"ratio {report['ingest_ratio_long']:.2f}"
        )
    print(
        f"English talk transcribed: tiny.en {english_times['english_tiny_s']:.2f} s, "
        f"base {english_times['english_base_s']:.2f} s"
    )
    print(json.dumps(report, ensure_ascii=False))
    return 0


def named_among(directory: Path, languages: tuple[str, ...]) -> dict:
    """The talks again, each sentence's words also on a slide, indexed with screen text on and
    ``speech_languages`` naming the corpus's languages (a library that knows what it
    speaks): the languages named; R@1 of the same queries over speech alone; and of the
    English queries over screen text alone, whose slides are read as in the talk's language
    (those in Latin letters: ``READ``), with and without dictionaries."""
    from vifusion.runtime import Runtime

    paths, queries = corpus(directory / "videos", list(languages), slides=True)
    cfg = Config(data_dir=directory / "data", dictionaries=(), speech_languages=languages)
    with Runtime(cfg, writer=True) as rt:
        results, _ = index_timed(rt, paths)
        ids = {Path(r.path).name: r.video_id for r in results}
        detected = {p.stem: rt.catalog.get_video(ids[p.name]).language for p in paths}
        lexical = with_dictionaries(rt)

        def ranks(searcher, asked_in: str, kind: str) -> list[int | None]:
            out = []
            for q in queries:
                if q.language == "en" or q.asked_in != asked_in:
                    continue
                if kind == "screen" and q.language not in READ:
                    continue
                start, end = (
                    SLIDES[q.start_s > SLIDES[0][1]] if kind == "screen" else (q.start_s, q.end_s)
                )
                found = searcher.text(q.text, TOP_K, modalities=[kind])
                out.append(rank_of(found, ids[q.video], start, end))
            return out

        speech_own = ranks(rt.searcher, "own", "speech")
        speech_en, speech_dict = (ranks(s, "english", "speech") for s in (rt.searcher, lexical))
        screen_en, screen_dict = (ranks(s, "english", "screen") for s in (rt.searcher, lexical))
    foreign = [x for x in languages if x != "en"]
    share = lambda got: round(sum(r == 1 for r in got) / len(got), 3)  # noqa: E731
    return {
        "among_detected": detected,
        "among_detected_right_foreign": round(
            sum(detected[x] == x for x in foreign) / len(foreign), 3
        ),
        "among_r1_own_language": share(speech_own),
        "among_r1_english_query": share(speech_en),
        "among_r1_english_query_dictionaries": share(speech_dict),
        "slides_r1_english_query": share(screen_en),
        "slides_r1_english_query_dictionaries": share(screen_dict),
    }


def with_dictionaries(rt):
    """A searcher over ``rt``'s library whose English queries also look for their words in
    FreeDict's dictionaries (``_dictionaries.py``); ``rt``'s own has none."""
    from vifusion.query.searcher import Searcher

    s = rt.searcher
    cfg = s.cfg.model_copy(update={"dictionaries": (fetch_dictionaries(),)})
    return Searcher(cfg, s.shards, s.embedder, s.catalog)


def real_voices(rt, lexical, directory: Path, languages: list[str]) -> dict:
    """Index the real-voice talks into ``rt``'s library (timed apart) and ask their words
    (item 6), English ones also through ``lexical`` (dictionaries); prints a table, returns
    the report's ``real_`` fields."""
    paths, queries = real_corpus(directory, languages)
    results, seconds = index_timed(rt, paths)
    ids = {Path(r.path).name: r.video_id for r in results}
    detected = {
        lang: rt.catalog.get_video(ids[p.name]).language for lang, p in zip(languages, paths)
    }
    ranks, ranks_dict = [], []
    ms: dict[str, list[float]] = {"plain": [], "dictionaries": []}
    for q in queries:
        videos = sorted(rt.catalog.ready_ids(None, None, [q.language]))
        for searcher, out, way in (
            (rt.searcher, ranks, "plain"),
            (lexical, ranks_dict, "dictionaries"),
        ):
            t0 = time.perf_counter()
            found = searcher.text(q.text, TOP_K, "segment", videos)
            if q.asked_in == "english":
                ms[way].append(1000 * (time.perf_counter() - t0))
            out.append(rank_of(found, ids[q.video], q.start_s, q.end_s))
    p50 = {way: statistics.median(v) for way, v in ms.items()}

    def r1(asked_in: str, lang: str | None = None, ranks=ranks) -> float:
        got = [
            r
            for r, q in zip(ranks, queries)
            if q.asked_in == asked_in and (lang is None or q.language == lang)
        ]
        return round(sum(r == 1 for r in got) / len(got), 3)

    print(
        f"real voices: {len(paths)} talks of recorded words, {len(queries)} queries, "
        f"indexed in {seconds:.1f} s"
    )
    print(
        f"{'lang':5} {'detected':9} {'R@1 own':>8} {'R@1 en':>7} {'+dict':>6}  "
        "heard (English rendering)"
    )
    for lang, p in zip(languages, paths):
        rows = rt.catalog.texts(ids[p.name], "speech")
        said = " | ".join(r.text + (f" ({r.english})" if r.english else "") for r in rows)
        print(
            f"{lang:5} {detected[lang] or '-':9} {r1('own', lang):>8.3f} "
            f"{r1('english', lang):>7.3f} {r1('english', lang, ranks_dict):>6.3f}  {said[:300]}"
        )
    right = sum(detected[x] == x for x in languages) / len(languages)
    print(
        f"real voices over {len(languages)} languages: detected right {right:.3f}, "
        f"R@1 own-language word {r1('own'):.3f}, R@1 English word {r1('english'):.3f}, "
        f"with dictionaries {r1('english', None, ranks_dict):.3f}"
    )
    print(
        f"English query p50, filtered to its language: {p50['plain']:.1f} ms, "
        f"with dictionaries {p50['dictionaries']:.1f} ms (the first of each language reads "
        "its dictionaries)"
    )
    return {
        "real_detected": detected,
        "real_detected_right": round(right, 3),
        "real_r1_own_language": r1("own"),
        "real_r1_english_query": r1("english"),
        "real_r1_english_query_dictionaries": r1("english", None, ranks_dict),
        "real_english_p50_ms": round(p50["plain"], 1),
        "real_english_p50_ms_dictionaries": round(p50["dictionaries"], 1),
        "real_queries": len(queries),
    }


def english_tiny_vs_base(data_dir: Path, path: Path, repeats: int) -> dict:
    """Seconds (median wall of ``repeats`` after a warm-up) to transcribe ``path`` with English
    on tiny.en and on base (``data_dir``: where base was joined), and what each heard."""
    from vifusion.extract.speech import Transcriber

    out: dict = {}
    for name, tiny in (("tiny", True), ("base", False)):
        transcriber = Transcriber(Config(data_dir=data_dir, speech_english_tiny=tiny), "cpu")
        heard = transcriber.transcribe_file(path)
        times = []
        for _ in range(repeats):
            transcriber.forget_encodings()
            t0 = time.perf_counter()
            transcriber.transcribe_file(path)
            times.append(time.perf_counter() - t0)
        out[f"english_{name}_s"] = round(statistics.median(times), 3)
        out[f"english_{name}_heard"] = " ".join(s.text.strip() for s in heard.segments)
        print(f"English on {name}: {out[f'english_{name}_heard']!r}")
    return out


if __name__ == "__main__":
    run_benchmark(main, "multilingual")
