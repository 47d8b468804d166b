"""What `vifusion index` is given, and what it says of each input: files, folders searched
for video files, and lists of files, expanded to the files to index (``expand_paths``); each
input ends ready, skipped or failed (``IndexResult``), with progress on the way."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

VIDEO_SUFFIXES = frozenset(
    ".mp4 .m4v .mov .mkv .webm .avi .mpg .mpeg .ts .mts .flv .wmv .3gp .ogv".split()
)


@dataclass(frozen=True)
class IndexResult:
    """How one input ended: ``ready``, ``skipped`` (same content already indexed) or ``failed``."""

    path: str
    status: str
    video_id: int | None = None
    job_id: str | None = None
    frames: int = 0
    error: str | None = None
    warnings: tuple[str, ...] = ()  # what went wrong without failing it (its audio, say)


@dataclass(frozen=True)
class Progress:
    """One step of one job, for progress bars."""

    path: str
    frames_done: int
    frames_total: int


LIST_SUFFIXES = frozenset({".txt", ".list"})


def expand_paths(paths: Iterable[Path]) -> tuple[list[Path], list[IndexResult]]:
    """Files to index (folders searched recursively for video files; a ``.txt`` or ``.list``
    file names one path per line, relative to its own folder, ``#`` starting a comment), and
    the inputs that cannot even be tried, each with the reason."""
    files: list[Path] = []
    failed: list[IndexResult] = []
    for p in paths:
        p = Path(p)
        if p.is_file() and p.suffix.lower() in LIST_SUFFIXES:
            try:
                lines = p.read_text().splitlines()
            except (OSError, UnicodeDecodeError) as e:
                failed.append(
                    IndexResult(str(p), "failed", error=f"{p}: cannot read the list: {e}")
                )
                continue
            listed = [
                p.parent / line.strip()
                for line in lines
                if line.strip() and not line.lstrip().startswith("#")
            ]
            more, bad = expand_paths(x for x in listed if x.suffix.lower() not in LIST_SUFFIXES)
            files.extend(more)
            failed.extend(bad)
            failed.extend(
                IndexResult(
                    str(x), "failed", error=f"{x}: a list inside a list ({p}) is not followed"
                )
                for x in listed
                if x.suffix.lower() in LIST_SUFFIXES
            )
        elif p.is_dir():
            found = sorted(
                f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in VIDEO_SUFFIXES
            )
            if not found:
                failed.append(
                    IndexResult(str(p), "failed", error=f"{p}: folder has no video files")
                )
            files.extend(found)
        elif p.is_file():
            files.append(p)
        elif p.exists():
            failed.append(IndexResult(str(p), "failed", error=f"{p}: not a regular file"))
        else:
            failed.append(IndexResult(str(p), "failed", error=f"{p}: no such file or folder"))
    return files, failed


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
