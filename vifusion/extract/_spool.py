"""A video handed to an extractor on another node, through Ray's object store.

The nodes of a cluster share no disk: the file an upload, a URL fetch or a ``file://`` path
left on the ingest pool's node is read there, in chunks, into the object store; the
extractor writes the chunks to a private temp file on its own node, decodes that and
removes it. An extractor on the pool's own node opens the path itself (no copy).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import ray

from vifusion.extract.decode import open_video

CHUNK_BYTES = 64 << 20  # one object per chunk: neither side holds a whole video in memory


def ship(path: Path, follow_symlinks: bool = True) -> list[ray.ObjectRef]:
    """The file's bytes as object refs, in order; DecodeError (with the reason) where it is
    no file to decode, as the extractor's own open would say."""
    refs = []
    with open_video(path, follow_symlinks) as file:
        while chunk := file.read(CHUNK_BYTES):
            refs.append(ray.put(chunk))
    return refs


@contextmanager
def received(chunks: list[ray.ObjectRef], name: str) -> Iterator[Path]:
    """The shipped file, written under this node's temp dir with its own ``name`` (decoders
    guess formats by it); removed on leaving the block."""
    folder = Path(tempfile.mkdtemp(prefix="vifusion-media-"))
    try:
        path = folder / Path(name).name
        with open(path, "wb") as f:
            for ref in chunks:
                f.write(ray.get(ref))
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)
