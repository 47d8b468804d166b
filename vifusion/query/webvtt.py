"""Transcripts as WebVTT subtitles (https://www.w3.org/TR/webvtt1/)."""

from __future__ import annotations

from collections.abc import Iterable

from vifusion.catalog import TextRow


def webvtt(rows: Iterable[TextRow], english: bool = False) -> str:
    """A WebVTT file of ``rows`` (in time order): one cue each, named ``<kind>-<n>``.

    A cue's text is one line, ``&``, ``<`` and ``>`` escaped: a player shows the words as
    they were said or written, never as markup, and no text can end a cue early ("-->" or
    a blank line). A row of no length lasts a millisecond (a cue must end after it starts);
    a row of no words is left out. ``english``: each row's English rendering where it has
    one (the words as said where they are English or were not rendered).

    The header names the language (``Language:``, a track's ``srclang``): "en" for the
    English rendering, else that of the first row whose language is known (a video that
    switches languages is named by the one it starts in); none where no row knows."""
    rows = list(rows)
    language = "en" if english else next((r.language for r in rows if r.language), None)
    out = ["WEBVTT", *([f"Language: {language}"] if language else []), ""]
    for r in rows:
        start = round(r.start_s * 1000)
        end = max(round(r.end_s * 1000), start + 1)
        said = (r.english or r.text) if english else r.text
        text = (
            " ".join(said.split()).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        )
        if not text:
            continue
        out += [f"{r.kind}-{r.n}", f"{_clock(start)} --> {_clock(end)}", text, ""]
    return "\n".join(out)


def _clock(ms: int) -> str:
    """Milliseconds as HH:MM:SS.mmm (hours grow past two digits if they must)."""
    s, ms = divmod(ms, 1000)
    m, s = divmod(s, 60)
    h, m = divmod(m, 60)
    return f"{h:02d}:{m:02d}:{s:02d}.{ms:03d}"
