"""Speech and on-screen text: what the two models cost on one core.

1. ``asr_rtf``: compute seconds per second of audio for ``Transcriber.transcribe`` (tiny.en,
   int8, one thread, VAD on, word times on) over a ~10 s espeak-ng clip, decoded beforehand
   (the decode is not counted). Compute seconds: this process's CPU time, so other load on
   the host does not inflate it; the wall-clock figure is printed beside it.
2. ``ocr_fps``: frames per CPU second for ``ScreenReader.read`` (RapidOCR, one thread) on a
   640x360 slide of three lines.

Each is the median of ``--repeats`` runs after one warm-up. The last line is one JSON object.
(The retrieval figures of issue 34, r1_all, r1_visual_only and ingest_ratio, come with the
ingest wiring.)

Run (from the repository root):

    .venv/bin/python benchmarks/multimodal.py           # 5 repeats
    .venv/bin/python benchmarks/multimodal.py --quick   # 2 repeats: well under a minute
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, run_benchmark  # noqa: E402

from vifusion import _talks  # noqa: E402
from vifusion.config import Config  # noqa: E402
from vifusion.extract.audio import read_audio  # noqa: E402
from vifusion.extract.screentext import ScreenReader  # noqa: E402
from vifusion.extract.speech import Transcriber  # noqa: E402

SAID = [
    (0.3, "Welcome back. Today we look at how the cache behaves under load."),
    (5.2, "The second chart shows latency for each region in March."),
]
SHOWN = ["Cache latency by region", "p99 under 40 ms in March", "Next: failover drills"]


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
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 repeats instead of 5")
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args()
    repeats = args.repeats or (2 if args.quick else 5)
    if not _talks.have_espeak():
        print("multimodal: espeak-ng is not installed (Debian: apt-get install espeak-ng)", file=sys.stderr)
        return 2
    cfg = Config(speech_threads=1, ocr_threads=1)

    with tempfile.TemporaryDirectory(prefix="vifusion-multimodal-") as tmp:
        talk = _talks.write_talk(Path(tmp) / "clip.mp4", 10.0, said=SAID)
        start_s, pcm, _ = read_audio(talk.path, cfg.audio_max_s)
    audio_s = len(pcm) / 16_000
    transcriber = Transcriber(cfg, device="cpu")
    heard = " ".join(s.text for s in transcriber.transcribe(pcm, start_s))
    asr_cpu, asr_wall = _measure(lambda: transcriber.transcribe(pcm, start_s), repeats)

    reader = ScreenReader(cfg, device="cpu")
    slide = _talks.slide(SHOWN, size=(640, 360))
    read = [ln.text for ln in reader.read(slide)]
    ocr_cpu, ocr_wall = _measure(lambda: reader.read(slide), repeats)

    print(f"speech: {audio_s:.1f} s of espeak-ng audio; tiny.en heard: {heard!r}")
    print(f"  {asr_cpu:.3f} cpu s ({asr_wall:.3f} wall s) per run: asr_rtf {asr_cpu / audio_s:.3f}")
    print(f"screen text: 640x360 slide; read: {read!r}")
    print(f"  {ocr_cpu:.3f} cpu s ({ocr_wall:.3f} wall s) per frame: ocr_fps {1 / ocr_cpu:.2f}")
    report = {
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
