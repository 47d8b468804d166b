"""Embed the library again with another visual model, then switch to it (``vifusion reindex``).

Vectors of two models never mix (``index/model.py``), so a new visual model needs a new shard
set: every ready video's frames are decoded from its stored media and embedded with
``cfg.visual_model``, its speech and screen-text rows embedded again from the catalog's words
(the text model is the same, the words need no second transcription), into a new folder
(``layout.new_index_dir``). Meanwhile the shard set in use is untouched and readers keep
answering from it; at the end ``index/current`` is switched to the new set (one rename) and
the old set removed.

The caller holds the data dir's writer lock, so no ingest writes the old set meanwhile (a
running service holds it: stop it, reindex, start it with the new ``visual_model``). Frames
are written as sampled, not folded by the aggregator's dedup. A video whose media is gone is
left out of the new set and said so in the result.
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
from vifusion.index.layout import (
    check_layout,
    new_index_dir,
    remove_index,
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


def reindex(cfg: Config, progress: Callable[[int, int], None] | None = None) -> Reindexed:
    """Embed every ready video with ``cfg.visual_model`` into a new shard set and switch to it.
    ``progress(done, total)`` after each video. The caller holds the writer lock."""
    check_layout(cfg.data_dir, cfg.num_shards)
    backbone = load_backbone(cfg)
    folder = new_index_dir(cfg.data_dir)
    done = Reindexed(str(backbone.record), folder=str(folder))
    shards = [Shard(n, shard_dir(cfg.data_dir, n, folder), cfg) for n in range(cfg.num_shards)]
    try:
        catalog = open_catalog(cfg, read_only=True)
        try:
            ids = sorted(catalog.ready_ids())
            for i, video_id in enumerate(ids):
                shard = shards[shard_for(video_id, cfg.num_shards)]
                why = _embed_video(cfg, catalog, backbone, shard, video_id)
                if isinstance(why, str):
                    done.skipped[video_id] = why
                    log.warning("reindex: video %d left out: %s", video_id, why)
                else:
                    done.videos += 1
                    done.frames += why
                if progress is not None:
                    progress(i + 1, len(ids))
        finally:
            catalog.close()
        for shard in shards:  # each new shard loads from one file, not a log of every batch
            shard.snapshot()
    except BaseException:
        remove_index(cfg.data_dir, folder)
        raise
    old = switch_index(cfg.data_dir, folder)
    remove_index(cfg.data_dir, old)
    return done


def _embed_video(
    cfg: Config, catalog: Catalog, backbone: Backbone, shard: Shard, video_id: int
) -> int | str:
    """One video's frames and text rows into ``shard``: the frames written, or why not."""
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
            for frames, spans in batches:
                visual, semantic = backbone.embed_frames(frames)
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
