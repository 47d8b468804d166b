"""On-screen text in scripts the reader (PP-OCRv4: Latin letters and Chinese) does not know is
dropped and counted, never stored as look-alike Latin letters (#55 item 6). Real RapidOCR
models on slides drawn with DejaVu Sans, which has the glyphs of these scripts."""

from __future__ import annotations

import pytest

from vifusion.config import Config
from vifusion.extract.screentext import ScreenReader
from vifusion.samples import talks as _talks

LATIN = ["Quarterly budget review", "Ça coûte très cher à Besançon"]
NOT_READ = {  # lines the reader returned as Latin-letter nonsense (e.g. "KBapTanbHbIN OTyeT")
    "cyrillic": ["Квартальный отчёт", "План найма в Москве"],
    "greek": ["Τριμηνιαία ανασκόπηση", "Σχέδιο προσλήψεων"],
    "arabic": ["مراجعة الميزانية الفصلية", "خطة التوظيف"],
    "armenian": ["Եռամսյակային բյուջե"],  # read "tnwuujwqwjhu pjnl2t" at a mean of 0.92
}


@pytest.fixture(scope="module")
def reader() -> ScreenReader:
    return ScreenReader(Config(ocr_threads=1))


@pytest.mark.parametrize("script", sorted(NOT_READ))
def test_a_slide_in_a_script_not_read_gives_no_text_and_is_counted(reader, script):
    tracker = reader.track()
    spans = tracker.add(_talks.slide(NOT_READ[script]), 0.0, 2.0, changed=True)
    spans += tracker.finish()
    assert spans == []
    assert tracker.lines_foreign == len(NOT_READ[script])
    assert tracker.warning() == (
        f"screen text: {len(NOT_READ[script])} line(s) in a script the reader does not read "
        "(it reads Latin letters and Chinese) were left out"
    )


def test_latin_lines_beside_them_are_kept_and_a_line_shown_twice_is_counted_once(reader):
    tracker = reader.track()
    mixed = _talks.slide([LATIN[0], NOT_READ["cyrillic"][0], LATIN[1]])
    spans = tracker.add(mixed, 0.0, 2.0, changed=True)
    spans += tracker.add(mixed, 2.0, 4.0, changed=True)
    spans += tracker.finish()
    assert [(s.text, s.start_s, s.end_s) for s in spans] == [
        ("Quarterly budget review", 0.0, 4.0),
        ("Ca coute tres cher a Besancon", 0.0, 4.0),  # the reader drops accents itself
    ]
    assert tracker.lines_foreign == 1


def test_latin_text_alone_gives_no_warning(reader):
    tracker = reader.track()
    tracker.add(_talks.slide(LATIN), 0.0, 2.0, changed=True)
    assert [s.text for s in tracker.finish()] == [
        "Quarterly budget review",
        "Ca coute tres cher a Besancon",
    ]
    assert (tracker.lines_foreign, tracker.warning()) == (0, None)


def test_a_line_with_a_letter_of_a_script_not_read_is_foreign_even_when_read_surely():
    """The reader's look-alike guess at Greek can hold a Greek letter and no unsure one
    ("Tplμnvlaiα" at 480 px): that letter alone marks the line; Latin with accents and
    Chinese do not."""
    from vifusion.extract._ocr import Line
    from vifusion.extract.screentext import foreign

    def surely(text: str) -> Line:
        return Line(text, 0.9, tuple(0.9 for ch in text if ch != " "))

    assert foreign(surely("Tplμnvlaiα αvαokotnon"))
    assert not foreign(surely("Ça coûte très cher"))
    assert not foreign(surely("会议 agenda 2026"))
