"""Embed the library again with another visual model, then switch to it (``vifusion reindex``).

Vectors of two models never mix (``index/model.py``), so a new visual model needs a new shard
set: every ready video's frames are decoded from its stored media and embedded with
``cfg.visual_model``, its speech and screen-text rows embedded again from the catalog's words
(the text model is the same, the words need no second transcription), into a new folder
(``layout.new_index_dir``). Meanwhile the shard set in use is untouched and readers keep
answering from it; at the end ``index/current`` is switched to the new set (one rename) and
the old set removed.

``reindex`` is `vifusion reindex`: its caller holds the data dir's writer lock, so no ingest
writes the old set meanwhile. A running service holds that lock and reindexes through
``live_reindex.py``, which catches ``Rebuild`` up with what ingest wrote meanwhile. Frames
are embedded as the extractor embeds them, written as sampled, not folded by the
aggregator's dedup. A video whose media is gone is left out of the new set and said so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from vifusion.catalog import TEXT_KINDS, Catalog, open_catalog
from vifusion.config import Config
from vifusion.extract.actor import EMBED_SIDE
from vifusion.extract.backbone import Backbone, load_backbone
from vifusion.extract.people import PeopleDetector
from vifusion.index.layout import (
    check_layout,
    new_index_dir,
    remove_index,
    remove_unused,
    shard_dir,
    shard_for,
    switch_index,
)
from vifusion.index.shard import Shard
from vifusion.types import FusedBatch

log = logging.getLogger(__name__)
_TEXT_BATCH = 256  # text rows embedded at a time


@dataclass
class Reindexed:
    """What a reindex did: the model now in use, the videos embedded, those left out (id ->
    why), and the shard set's folder."""

    model: str
    videos: int = 0
    frames: int = 0
    skipped: dict[int, str] = field(default_factory=dict)
    folder: str = ""


class Rebuild:
    """A new shard set embedded with ``cfg.visual_model`` in ``index/gen-<k>``, beside the set in
    use: ``catch_up`` embeds every ready video it lacks and drops those no longer ready (call
    it again for what changed meanwhile), ``switch`` makes it the set in use, ``abandon``
    removes it. Its shards are written in this process; nothing else may write them."""

    def __init__(self, cfg: Config, progress: Callable[[int, int], None] | None = None) -> None:
        check_layout(cfg.data_dir, cfg.num_shards)
        self.cfg = cfg
        self.backbone = load_backbone(cfg)
        # the face words a frame's concepts carry, as ingest gives them
        self._people = PeopleDetector() if cfg.people else None
        self._progress = progress
        remove_unused(cfg.data_dir)  # what a reindex cut short left behind
        self.folder = new_index_dir(cfg.data_dir)
        self.done = Reindexed(str(self.backbone.record), folder=str(self.folder))
        self._embedded: set[int] = set()
        self._shards = [
            Shard(n, shard_dir(cfg.data_dir, n, self.folder), cfg) for n in range(cfg.num_shards)
        ]

    def catch_up(self, catalog: Catalog) -> int:
        """Embed the ready videos the new set lacks, remove those deleted since they were
        embedded; return how many videos were embedded."""
        ready = set(catalog.ready_ids())
        for video_id in sorted(self._embedded - ready):
            self._shard(video_id).delete_video(video_id)
            self._embedded.discard(video_id)
            self.done.videos -= 1
        todo = sorted(ready - self._embedded - self.done.skipped.keys())
        for i, video_id in enumerate(todo):
            why = _embed_video(
                self.cfg, catalog, self.backbone, self._people, self._shard(video_id), video_id
            )
            if isinstance(why, str):
                self.done.skipped[video_id] = why
                log.warning("reindex: video %d left out: %s", video_id, why)
            else:
                self._embedded.add(video_id)
                self.done.videos += 1
                self.done.frames += why
            if self._progress is not None:
                self._progress(i + 1, len(todo))
        return len(todo)

    def switch(self) -> Path:
        """Snapshot the new shards (each then loads from one file, not a log of every batch),
        close them and make the new set the one in use; return the folder of the set before."""
        for shard in self._shards:
            shard.snapshot()
            shard.close()
        return switch_index(self.cfg.data_dir, self.folder)

    def abandon(self) -> None:
        """Remove the new set (a reindex that failed or was stopped)."""
        for shard in self._shards:
            shard.close()
        remove_index(self.cfg.data_dir, self.folder)

    def _shard(self, video_id: int) -> Shard:
        return self._shards[shard_for(video_id, len(self._shards))]


def reindex(cfg: Config, progress: Callable[[int, int], None] | None = None) -> Reindexed:
    """Embed every ready video with ``cfg.visual_model`` into a new shard set and switch to it.
    ``progress(done, total)`` after each video. The caller holds the writer lock, so nothing
    else writes the library meanwhile."""
    rebuild = Rebuild(cfg, progress)
    try:
        catalog = open_catalog(cfg, read_only=True)
        try:
            rebuild.catch_up(catalog)
        finally:
            catalog.close()
    except BaseException:
        rebuild.abandon()
        raise
    remove_index(cfg.data_dir, rebuild.switch())
    return rebuild.done


def _embed_video(
    cfg: Config,
    catalog: Catalog,
    backbone: Backbone,
    people: PeopleDetector | None,
    shard: Shard,
    video_id: int,
) -> int | str:
    """One video's frames and text rows into ``shard``, embedded as the extractor embeds
    them (``extract/actor.py``: the people detector's words beside the frames): the frames
    written, or why not."""
    from vifusion.extract.decode import DecodeError, open_sampled, open_video

    video = catalog.get_video(video_id)
    path = video.media_path if video is not None else None
    if path is None:
        return "no media on this machine"
    frames_done = 0
    try:
        # a file indexed in place is stored resolved: opened without following links, as ingest
        with open_video(path, follow_symlinks=video.media is not None) as file:
            _, _, batches = open_sampled(
                path, cfg.sample_fps, cfg.max_frames, EMBED_SIDE, cfg.embed_batch, file=file
            )
            faces = people.track(cfg.people_backoff_max) if people else None
            for frames, spans in batches:
                visual, semantic = backbone.embed_frames(
                    frames, faces.terms(frames) if faces else None
                )
                shard.add(
                    FusedBatch.of_video(
                        video_id, frames_done, [(t0, t1) for _, t0, t1 in spans], visual, semantic
                    )
                )
                frames_done += len(spans)
    except (DecodeError, OSError) as e:
        shard.delete_video(video_id)
        return f"{Path(path).name}: {e}"
    for kind in TEXT_KINDS:
        rows = sorted(catalog.texts(video_id, kind), key=lambda r: r.n)
        for first in range(0, len(rows), _TEXT_BATCH):
            part = rows[first : first + _TEXT_BATCH]
            # as the extractor embeds them: a row with an English rendering, with it
            said = [" ".join(filter(None, (r.text, getattr(r, "english", None)))) for r in part]
            shard.add(
                FusedBatch.of_texts(
                    video_id,
                    kind,
                    part[0].n,
                    [(r.start_s, r.end_s) for r in part],
                    backbone.embed_text(said),
                )
            )
    return frames_done
