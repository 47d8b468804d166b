"""On-screen text with the real RapidOCR models on rendered slides and videos (no mocks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vifusion.config import Config
from vifusion.extract._ocr import Line, _join_rows, _Piece, respace, word_gaps
from vifusion.extract.decode import decode
from vifusion.extract.screentext import ScreenReader, TextSpan, line_key, readable
from vifusion.samples import talks as _talks

REVENUE = "Quarterly revenue grew 42 percent"
HARBOUR = "Meet me at the old harbour"
ZORBLAX = "Zorblax launch in March"


@pytest.fixture(scope="module")
def reader() -> ScreenReader:
    return ScreenReader(Config(ocr_threads=1, ocr_still_interval_s=5.0))


def _frames(path: Path) -> list[tuple[np.ndarray, float, float]]:
    """The video's frames at 1 per second, at full size (what OCR needs), with their times."""
    return [
        (f, t0, t1)
        for batch, times in decode(path, 1.0, 3600, short_side=360)
        for f, (_, t0, t1) in zip(batch, times)
    ]


# --- one picture -----------------------------------------------------------------------------


def test_a_slide_is_read_line_by_line_with_its_spaces(reader: ScreenReader) -> None:
    lines = reader.read(_talks.slide([REVENUE, HARBOUR, ZORBLAX]))
    # The recogniser runs these words together ("Meetmeattheoldharbour"); the spaces are put back.
    assert [ln.text for ln in lines] == [REVENUE, HARBOUR, ZORBLAX]
    assert all(reader.cfg.ocr_min_confidence <= ln.confidence <= 1 for ln in lines)


@pytest.mark.parametrize(
    "picture",
    [
        np.full((360, 640, 3), 255, np.uint8),
        np.zeros((360, 640, 3), np.uint8),
        np.random.default_rng(0).integers(0, 256, (360, 640, 3), dtype=np.uint8),
        np.zeros((8, 8, 3), np.uint8),
    ],
    ids=["white", "black", "noise", "tiny"],
)
def test_a_picture_without_text_gives_no_lines(reader: ScreenReader, picture: np.ndarray) -> None:
    assert reader.read(picture) == []


@pytest.mark.parametrize(
    "lines",
    [["გამარჯობა მსოფლიო", "საქართველო ლამაზია"], ["Καλημέρα κόσμε δοκιμή"]],
    ids=["georgian", "greek"],
)
def test_a_script_the_models_do_not_know_gives_no_lines(
    reader: ScreenReader, lines: list[str]
) -> None:
    assert reader.read(_talks.slide(lines)) == []


def test_readable() -> None:
    def line(text: str, conf: float = 0.99) -> Line:
        return Line(text, conf, (conf,) * len(text.replace(" ", "")))

    assert readable(line("Error code 503"), 0.85)
    assert readable(line("日本語のテキスト"), 0.85)
    assert not readable(line("Error code 503", 0.8), 0.85)
    assert not readable(line("Kα入nμεpα kooμe"), 0.85)  # Greek read as Latin, Greek and CJK letters
    assert not readable(line("pИBeT MИp"), 0.85)  # Cyrillic as Latin and Cyrillic
    assert not readable(line("H"), 0.85) and not readable(line("- ."), 0.85)


def test_word_gaps_and_respace() -> None:
    crop = _talks.slide([HARBOUR], size=(520, 60), font_size=32)[9:41]  # as tight as the detector's
    assert len(word_gaps(crop)) == 5  # between the six words, not between letters
    # A space goes where a word gap falls between two characters (at their columns), once.
    assert respace("Meetme", [5, 15, 25, 35, 60, 70], [(45, 52)]) == "Meet me"
    assert respace("Meet me", [5, 15, 25, 35, 48, 60, 70], [(45, 52)]) == "Meet me"
    assert respace("日本", [0.0, 100.0], [(40, 60)]) == "日本"  # never between CJK characters


def test_boxes_on_one_row_are_one_line() -> None:
    left = _Piece(10, 200, 50, 80, "Quarterly revenue g", (0.9,) * 17)
    right = _Piece(195, 400, 51, 81, "grew 42 percent", (0.9,) * 13)
    below = _Piece(10, 200, 120, 150, "Zorblax", (0.9,) * 7)
    other_column = _Piece(600, 700, 50, 80, "Notes", (0.9,) * 5)
    rows = _join_rows([right, below, left, other_column])
    assert [r.text for r in rows] == [REVENUE, "Notes", "Zorblax"]
    assert len(rows[0].confs) == len(REVENUE.replace(" ", ""))


# --- a video ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slides(tmp_path_factory: pytest.TempPathFactory) -> _talks.Talk:
    return _talks.write_talk(
        tmp_path_factory.mktemp("screentext") / "slides.mkv",
        16.0,
        shown=[
            (2.0, 7.0, [REVENUE, HARBOUR]),
            (7.0, 12.0, [REVENUE, ZORBLAX]),
            (13.0, 16.0, ["გამარჯობა მსოფლიო"]),  # a script the models do not know: no span
        ],
        audio="none",
    )


def test_written_phrases_are_read_over_the_time_they_are_shown(
    reader: ScreenReader, slides: _talks.Talk
) -> None:
    tracker = reader.track()
    spans: list[TextSpan] = []
    frames = _frames(slides.path)
    for rgb, start_s, end_s in frames:
        spans += tracker.add(rgb, start_s, end_s)
    spans += tracker.finish()
    # Each span runs from the first sampled frame showing its text to the first not showing
    # it, each frame's own time: within half a sample interval (0.5 s) of the truth.
    got = sorted((s.text, s.start_s, s.end_s) for s in spans)
    assert [text for text, _, _ in got] == [HARBOUR, REVENUE, ZORBLAX]
    assert [times for _, *times in got] == [
        pytest.approx([2.0, 7.0], abs=0.5),
        pytest.approx([2.0, 12.0], abs=0.5),  # on two slides in a row: one span
        pytest.approx([7.0, 12.0], abs=0.5),
    ]
    # Read where the picture changed (0, 2, 7, 12, 13 s) and once more in each still stretch
    # longer than ocr_still_interval_s (5 s): not every frame.
    assert tracker.frames_read < len(frames) == 16
    assert reader.spans(frames) == spans


def test_a_still_picture_is_read_again_after_the_still_interval(reader: ScreenReader) -> None:
    tracker = reader.track()
    picture = _talks.slide([ZORBLAX])
    spans = [
        s for t in range(12) for s in tracker.add(picture, float(t), t + 1.0)
    ] + tracker.finish()
    assert tracker.frames_read == 3  # at 0, 5 and 10 s
    assert [(s.text, s.start_s, s.end_s) for s in spans] == [(ZORBLAX, 0.0, 12.0)]


def test_the_callers_change_signal(reader: ScreenReader) -> None:
    tracker = reader.track()
    a, b = _talks.slide([HARBOUR]), _talks.slide([ZORBLAX])
    tracker.add(a, 0.0, 1.0)
    tracker.add(a, 1.0, 2.0, changed=True)  # the caller says it changed: read
    tracker.add(b, 2.0, 3.0, changed=False)  # the caller says it did not: not read
    assert tracker.frames_read == 2
    spans = tracker.add(b, 3.0, 4.0) + tracker.finish()  # the tracker's own test sees the change
    assert tracker.frames_read == 3
    assert [(s.text, s.start_s, s.end_s) for s in spans] == [
        (HARBOUR, 0.0, 3.0),
        (ZORBLAX, 3.0, 4.0),
    ]


def _footage(seconds: int) -> list[np.ndarray]:
    """Camera footage at 1 frame/s (the demo videos' pan-and-zoom over photos and moving
    shapes): it changes in every frame and shows no text."""
    from vifusion.samples import MOTION, render

    scenes = ["coffee", "chelsea", MOTION]
    return list(render(scenes, scene_s=seconds / len(scenes), fps=1, size=(640, 360)))


def _caption(rgb: np.ndarray, text: str, px: int = 20) -> np.ndarray:
    """``text`` burnt in as a subtitle: white with a black outline, centred near the bottom."""
    from PIL import Image, ImageDraw

    img = Image.fromarray(rgb)
    draw = ImageDraw.Draw(img)
    font = _talks.font(px)
    x = (img.width - draw.textlength(text, font=font)) / 2
    draw.text(
        (x, img.height - 2.2 * px),
        text,
        font=font,
        fill=(255, 255, 255),
        stroke_width=2,
        stroke_fill=(0, 0, 0),
    )
    return np.asarray(img)


def test_footage_without_text_is_looked_at_every_8th_frame(reader: ScreenReader) -> None:
    """Every frame changes, so each one could be looked at; the gate looks at the first, then
    every 8th (ocr_backoff_max), and where the picture holds: 0, 8, 16, 19 (the end of a pan,
    as the frame before) and 27 s, not 30 frames. A slide after them, shown for 4 s, is read
    at once (the full look every 30 s falls on it)."""
    assert reader.cfg.ocr_backoff_max == 8
    tracker = reader.track()
    footage = _footage(30)
    spans = [s for t, rgb in enumerate(footage) for s in tracker.add(rgb, float(t), t + 1.0)]
    looked = tracker.frames_read + tracker.frames_gated
    assert spans == [] and (looked, tracker.frames_skipped) == (5, 25)
    slide = _talks.slide([ZORBLAX])
    spans = [s for t in range(30, 34) for s in tracker.add(slide, float(t), t + 1.0)]
    spans += tracker.finish()
    assert [(s.text, s.start_s, s.end_s) for s in spans] == [(ZORBLAX, 30.0, 34.0)]
    # Read at 30 s; the frames skipped before it (28, 29 s) looked at for where it started.
    assert (tracker.frames_read, tracker.frames_gated) == (1, 7)


def test_a_slide_held_after_footage_is_read_from_its_start(reader: ScreenReader) -> None:
    """A slide shown for 3 s between stretches of camera footage, where the gate looks at
    every 8th changed frame: its second frame holds the picture of its first, so it is
    looked at then, not after the slide has gone."""
    tracker = reader.track()
    slide = _talks.slide([ZORBLAX])
    spans: list[TextSpan] = []
    for t, rgb in enumerate(_footage(30)):
        spans += tracker.add(slide if 20 <= t < 23 else rgb, float(t), t + 1.0)
    spans += tracker.finish()
    assert [(s.text, s.start_s, s.end_s) for s in spans] == [(ZORBLAX, 20.0, 23.0)]


def test_every_changed_frame_is_looked_at_without_the_back_off() -> None:
    reader = ScreenReader(Config(ocr_threads=1, ocr_backoff_max=1))
    tracker = reader.track()
    for t, rgb in enumerate(_footage(12)):
        tracker.add(rgb, float(t), t + 1.0)
    assert tracker.finish() == []
    assert (tracker.frames_read + tracker.frames_gated, tracker.frames_skipped) == (12, 0)


@pytest.mark.parametrize("first", [20, 21, 22, 23])
def test_a_caption_as_long_as_the_back_off_is_found_from_its_start(first: int) -> None:
    """A subtitle over moving footage for 4 s, where the gate looks at every 4th changed
    frame: whichever of its frames the look falls on, the frames skipped before it are looked
    at then, and its span starts where it showed."""
    reader = ScreenReader(Config(ocr_threads=1, ocr_backoff_max=4))
    text = "The keys are under the red boat"
    tracker = reader.track()
    spans: list[TextSpan] = []
    for t, rgb in enumerate(_footage(30)):
        shown = first <= t < first + 4
        spans += tracker.add(_caption(rgb, text) if shown else rgb, float(t), t + 1.0)
    spans += tracker.finish()
    assert [(line_key(s.text), s.start_s, s.end_s) for s in spans] == [
        (line_key(text), float(first), first + 4.0)
    ]


def test_after_text_every_changed_frame_is_looked_at_again(reader: ScreenReader) -> None:
    """Subtitles come in runs: once one is found, the frames after it are looked at one by
    one (the back-off starts again from 1), so a 2-second line after it is not missed."""
    first, second = "The keys are under the red boat", "Where is the boat"
    tracker = reader.track()
    spans: list[TextSpan] = []
    for t, rgb in enumerate(_footage(30)):
        text = first if 8 <= t < 16 else second if 18 <= t < 20 else None
        spans += tracker.add(_caption(rgb, text) if text else rgb, float(t), t + 1.0)
    spans += tracker.finish()
    assert [(line_key(s.text), s.start_s, s.end_s) for s in spans] == [
        (line_key(first), 8.0, 16.0),
        (line_key(second), 18.0, 20.0),
    ]


def test_text_too_small_for_the_gate_is_read_within_the_full_interval() -> None:
    small = _talks.slide(
        [REVENUE], size=(1280, 720), font_size=12
    )  # 12 px on 720 lines: the gate misses it
    reader = ScreenReader(Config(ocr_threads=1, ocr_still_interval_s=2.0, ocr_full_interval_s=4.0))
    assert not reader.sees_text(small)
    tracker = reader.track()
    spans = [s for t in range(6) for s in tracker.add(small, float(t), t + 1.0)] + tracker.finish()
    assert [(s.text, s.start_s, s.end_s) for s in spans] == [(REVENUE, 4.0, 6.0)]
    assert (tracker.frames_gated, tracker.frames_read) == (2, 1)  # looked at 0 and 2 s, read at 4 s


def test_line_key() -> None:
    assert (
        line_key("Quarterly  Revenue grew")
        == line_key("quarterlyrevenue GREW")
        == "quarterlyrevenuegrew"
    )


def test_loads_and_reads_with_the_network_cut_off(tmp_path: Path) -> None:
    """In a fresh process where every socket connect fails and the hub is set offline."""
    np.save(tmp_path / "slide.npy", _talks.slide([ZORBLAX]))
    script = (
        "import socket, json, sys\n"
        "import numpy as np\n"
        "def refuse(*a, **k): raise OSError('network use in an offline test')\n"
        "socket.socket.connect = socket.socket.connect_ex = refuse\n"
        "socket.create_connection = refuse\n"
        "from vifusion.config import Config\n"
        "from vifusion.extract.screentext import ScreenReader\n"
        "lines = ScreenReader(Config(ocr_threads=1)).read(np.load(sys.argv[1]))\n"
        "print(json.dumps([ln.text for ln in lines]))\n"
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
    }
    argv = [sys.executable, "-c", script, str(tmp_path / "slide.npy")]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == [ZORBLAX]
