"""Bilingual dictionaries for the benchmarks' cross-language queries: FreeDict's English ->
{Spanish, French, German, Italian, Portuguese, Russian} and the small ones' reverse, from
Debian's ``dict-freedict-*`` packages (GPL), fetched into ``~/.cache/vifusion-dev/`` once
(``apt-get download`` + ``dpkg -x``; nothing installed, nothing committed). The product reads
them where Debian installs them (``Config.dictionaries``: /usr/share/dictd).

Run ``python benchmarks/_dictionaries.py`` to fetch them and print a few words.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _realmedia import CACHE, fetch_once

LANGUAGES = ("spa", "fra", "deu", "ita", "por", "rus")
# English-German is large (460,000 entries): its reverse would not be read (lexicon.REVERSE_BELOW).
REVERSE = ("spa", "fra", "ita", "por")
DEBS = tuple(f"dict-freedict-eng-{x}" for x in LANGUAGES) + tuple(
    f"dict-freedict-{x}-eng" for x in REVERSE
)


def fetch(cache: Path = CACHE) -> Path:
    """The directory of dictd files (as /usr/share/dictd holds them), downloaded once."""
    return fetch_once(cache / "dictionaries", DEBS) / "usr/share/dictd"


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from vifusion.query.lexicon import Lexicon

    words = Lexicon([fetch()])
    for lang in sorted(words.languages):
        print(lang, {w: words.translations(w, lang)[:3] for w in ("eye", "nose", "hat")})
