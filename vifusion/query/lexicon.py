"""English words in other languages, from bilingual dictionaries on disk: what lets an English
query find speech in another language by the words said (query translation by dictionary,
the cross-language retrieval that needs no translation model). Whisper's English rendering
of a segment is the other road, and renders a word said alone badly ("Olho" as "Oil").

``Config.dictionaries`` names the directories looked in. Read there: FreeDict's dictionaries
in dictd's format, as Debian's ``dict-freedict-eng-*`` packages install them in
/usr/share/dictd (``freedict-eng-spa.index`` + ``.dict.dz``); a reverse one
(``freedict-spa-eng``), read inverted, where the forward one is small; and the user's own
tab-separated ``en-XX.tsv`` (an English word, a tab, a word of language XX, per line).
Nothing ships in the package: a language without a dictionary is found by its English
rendering alone, as before. A language's dictionaries are read on the first query that
needs them (a second, once, for FreeDict's 460,000-entry English-German).
"""

from __future__ import annotations

import logging
import re
import threading
import zlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from vifusion.catalog import FUZZY_WEIGHT, edits, fold, max_edits
from vifusion.query import _dictd

log = logging.getLogger(__name__)

# Translations kept per English word, in the dictionary's order (its common senses first):
# the rest are rare senses, and each is one more word a keyword query scans for.
MAX_TRANSLATIONS = 8
# A reverse dictionary (language -> English) is read only beside a forward one smaller than
# this: it fills a small one's gaps, and a large one (English-German) has the words already.
REVERSE_BELOW = 50_000
# FreeDict names languages by ISO 639-3; speech is labelled by ISO 639-1 (Whisper's codes).
ISO3 = {
    "afr": "af", "ara": "ar", "bul": "bg", "cat": "ca", "ces": "cs", "cym": "cy", "dan": "da",
    "deu": "de", "ell": "el", "fin": "fi", "fra": "fr", "gle": "ga", "hin": "hi", "hrv": "hr",
    "hun": "hu", "ind": "id", "isl": "is", "ita": "it", "jpn": "ja", "kor": "ko", "lat": "la",
    "lit": "lt", "nld": "nl", "nob": "no", "nor": "no", "pol": "pl", "por": "pt", "ron": "ro",
    "rus": "ru", "slk": "sk", "slv": "sl", "spa": "es", "srp": "sr", "swe": "sv", "swh": "sw",
    "tha": "th", "tur": "tr", "ukr": "uk", "vie": "vi", "zho": "zh",
}  # fmt: skip
PUNCTUATION = ".,;:!?\"'()[]"  # stripped from a query word's ends (searcher.keywords too)
_FORWARD = re.compile(r"(?:.*-)?eng-([a-z]{3})\.index")
_REVERSE = re.compile(r"(?:.*-)?([a-z]{3})-eng\.index")
_TSV = re.compile(r"(?:en|eng)-([a-z]{2,3})\.tsv")


class Lexicon:
    """The English -> language dictionaries found in ``dirs``, each read once when first
    needed. Safe to share between threads."""

    def __init__(self, dirs: Iterable[Path]) -> None:
        self._files: dict[str, dict[str, list[Path]]] = {}
        for d in dirs:
            if not Path(d).is_dir():
                continue
            for path in sorted(Path(d).iterdir()):
                for kind, pattern in (("forward", _FORWARD), ("reverse", _REVERSE), ("tsv", _TSV)):
                    if (m := pattern.fullmatch(path.name)) and (lang := _code(m.group(1))):
                        self._files.setdefault(lang, {}).setdefault(kind, []).append(path)
        self._words: dict[str, dict[str, tuple[str, ...]]] = {}
        self._lock = threading.Lock()

    @property
    def languages(self) -> frozenset[str]:
        """The languages (ISO 639-1) English words can be put in."""
        return frozenset(self._files)

    def translations(self, word: str, language: str) -> tuple[str, ...]:
        """``word``'s translations into ``language``, the commonest first; an English plural's
        with its singular's ("ears": "Ohren" and "Ohr")."""
        if language not in self._files:
            return ()
        table = self._table(language)
        found = (
            w for form in _singulars(fold(word.strip(PUNCTUATION))) for w in table.get(form, ())
        )
        return tuple(dict.fromkeys(found))

    def slots(self, words: Sequence[str], language: str) -> list[tuple[str, ...]]:
        """For each English query word, the words that say it in ``language``: the word
        itself (a name, or a word both languages share) and its translations."""
        return [(w, *self.translations(w, language)) for w in words]

    def _table(self, language: str) -> dict[str, tuple[str, ...]]:
        with self._lock:
            if language not in self._words:
                self._words[language] = _read(self._files[language])
            return self._words[language]


def coverage(slots: Sequence[tuple[str, ...]], text: str) -> float:
    """The share of ``slots`` of which ``text`` holds a word (folded; "ojos" holds "ojo"),
    a word held only in a near spelling (within ``max_edits``: "Subrancelha" for
    "sobrancelha", as speech is heard) counting ``FUZZY_WEIGHT``, as keyword search counts
    the query's words a hit holds."""
    if not slots:
        return 0.0
    held = {fold(t) for t in re.findall(r"[^\W_]+", text)}
    total = 0.0
    for slot in slots:
        words = [fold(w) for w in slot]
        if any(_holds(held, w) for w in words):
            total += 1.0
        elif any(_near(held, w) for w in words):
            total += FUZZY_WEIGHT
    return total / len(slots)


def _holds(held: set[str], word: str) -> bool:
    """Whether ``held`` (folded words) has ``word``, or it with an ending of up to two
    letters (a plural, a case) where it has three letters or more."""
    return word in held or (
        len(word) >= 3 and any(t.startswith(word) and len(t) - len(word) <= 2 for t in held)
    )


def _near(held: set[str], word: str) -> bool:
    """Whether ``held`` has a near spelling of ``word`` (keyword search's rule)."""
    d = max_edits(word)
    return d > 0 and any(edits(word, t, d) <= d for t in held)


def _read(files: dict[str, list[Path]]) -> dict[str, tuple[str, ...]]:
    """An English -> words table from one language's files (``Lexicon``'s rules)."""
    table: dict[str, list[str]] = {}

    def add(english: str, words: Iterable[str]) -> None:
        kept = table.setdefault(fold(english), [])
        for w in words:
            if w not in kept and len(kept) < MAX_TRANSLATIONS:
                kept.append(w)

    for index in files.get("forward", []):
        for head, words in _readable(index, _dictd.entries):
            add(head, words)
    for tsv in files.get("tsv", []):
        for english, word in _readable(tsv, _tsv):
            add(english, [word])
    if len(table) < REVERSE_BELOW:
        for index in files.get("reverse", []):
            for head, words in _readable(index, _dictd.entries):
                for english in words:
                    add(english, [head])
    return {k: tuple(v) for k, v in table.items() if v}


def _readable(path: Path, read: Callable[[Path], Iterable[Any]]) -> list[Any]:
    """What ``read`` makes of ``path``, or nothing (with a warning) where it is damaged or
    unreadable: a broken dictionary costs its words, never a search."""
    try:
        return list(read(path))
    except (OSError, EOFError, ValueError, zlib.error) as e:  # gzip's BadGzipFile is an OSError
        log.warning("dictionary %s not read: %s", path, e)
        return []


def _tsv(path: Path) -> Iterable[tuple[str, str]]:
    """(English word, word) of a tab-separated file; lines of another shape left out."""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        english, _, word = line.partition("\t")
        english, word = english.strip(), word.strip()
        if english and word and " " not in word:
            yield english, word


def _code(name: str) -> str | None:
    return name if len(name) == 2 else ISO3.get(name)


def _singulars(word: str) -> list[str]:
    """``word``, then the singulars an English plural may have (eyes, glasses, berries)."""
    forms = [word]
    if word.endswith("ies") and len(word) > 4:
        forms.append(word[:-3] + "y")
    if word.endswith("es") and len(word) > 3:
        forms.append(word[:-2])
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        forms.append(word[:-1])
    return forms
