"""Transcripts as WebVTT subtitles (https://www.w3.org/TR/webvtt1/)."""

from __future__ import annotations

from collections.abc import Iterable

from vifusion.catalog import TextRow


def webvtt(rows: Iterable[TextRow]) -> str:
    """A WebVTT file of ``rows`` (in time order): one cue each, named ``<kind>-<n>``.

    A cue's text is one line, ``&``, ``<`` and ``>`` escaped: a player shows the words as
    they were said or written, never as markup, and no text can end a cue early ("-->" or
    a blank line). A row of no length lasts a millisecond (a cue must end after it starts);
    a row of no words is left out."""
    out = ["WEBVTT", ""]
    for r in rows:
        start = round(r.start_s * 1000)
        end = max(round(r.end_s * 1000), start + 1)
        text = (
            " ".join(r.text.split()).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
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
