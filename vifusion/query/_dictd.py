"""Reading a bilingual dictionary in dictd's format (``NAME.index`` beside ``NAME.dict.dz``
or ``NAME.dict``), as FreeDict publishes them and Debian's ``dict-freedict-*`` packages
install them: each headword with the one-word translations its entry gives.

An entry is its headword line ("nose /nouz/"), then a line per sense ("1. boca", "Auge <neut>
[anat.]"); an indented line is an example and a "see:" line a cross-reference, neither a
translation. Notes in <>, [], () and {} are dropped, and a translation of several words
("de bonne heure") is left out: keyword search matches one word at a time.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from pathlib import Path

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"  # offsets' digits
_B64 = {c: i for i, c in enumerate(ALPHABET)}
_NOTES = re.compile(r"<[^>]*>|\[[^\]]*\]|\([^)]*\)|\{[^}]*\}|^\d+\.\s*")


def data_file(index: Path) -> Path | None:
    """The entries beside ``index`` (dictzip'd or plain), or None where neither is there."""
    stem = index.name.removesuffix(".index")
    for name in (f"{stem}.dict.dz", f"{stem}.dict"):
        if (index.parent / name).is_file():
            return index.parent / name
    return None


def entries(index: Path) -> Iterator[tuple[str, list[str]]]:
    """(headword, its one-word translations in order) for each one-word headword of the
    dictionary whose index is ``index``; a headword may come more than once."""
    data = data_file(index)
    if data is None:
        return
    raw = gzip.open(data).read() if data.suffix == ".dz" else data.read_bytes()
    with index.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or " " in parts[0] or parts[0].startswith("00-database"):
                continue
            at, size = _number(parts[1]), _number(parts[2])
            if at is None or size is None:
                continue
            if words := senses(raw[at : at + size].decode("utf-8", errors="replace")):
                yield parts[0], words


def senses(entry: str) -> list[str]:
    """The one-word translations of a dictd entry, in the order it gives them, each once."""
    out: list[str] = []
    for line in entry.split("\n")[1:]:
        if not line or line[0].isspace() or line.startswith("see:"):
            continue
        for word in _NOTES.sub("", line).split(","):
            word = word.strip().strip(";.")
            if word and " " not in word and word not in out:
                out.append(word)
    return out


def _number(text: str) -> int | None:
    """dictd's base-64 offsets and sizes ("A" 0, "B" 1, ..., most significant first)."""
    n = 0
    for ch in text:
        if ch not in _B64:
            return None
        n = n * 64 + _B64[ch]
    return n
