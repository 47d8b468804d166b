"""Bilingual dictionaries written as FreeDict's dictd files are (an index of base-64 offsets
and sizes, the entries gzipped), for tests of ``vifusion.query.lexicon``."""

from __future__ import annotations

import gzip
from pathlib import Path

from vifusion.query._dictd import ALPHABET


def b64(n: int) -> str:
    """``n`` as dictd writes an offset (what ``_dictd`` reads back)."""
    out = ALPHABET[n % 64]
    while n := n // 64:
        out = ALPHABET[n % 64] + out
    return out


def write_dictd(directory: Path, name: str, entries: dict[str, str]) -> Path:
    """``name``.index and ``name``.dict.dz in ``directory``: each headword's entry is its
    line and then ``entries[headword]`` (FreeDict's sense lines)."""
    directory.mkdir(parents=True, exist_ok=True)
    data, index = b"", ["00-database-short\tA\tB"]
    for head, body in entries.items():
        entry = f"{head} /x/\n{body}\n\n".encode()
        index.append(f"{head}\t{b64(len(data))}\t{b64(len(entry))}")
        data += entry
    (directory / f"{name}.dict.dz").write_bytes(gzip.compress(data))
    (directory / f"{name}.index").write_text("\n".join(index) + "\n", encoding="utf-8")
    return directory / f"{name}.index"
