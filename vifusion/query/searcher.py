"""Queries -> moments. Text searches what is seen (the semantic space of the frames), said
(speech segments) and written (on-screen text spans); an image or a clip the visual space.

A text query builds up to five ranked lists of moments (frames by concept, ConSE; speech
and screen text by meaning, dense, and by words, keyword) and blends them into one ranking
(``vifusion.query.ranking``), by calibrated scores (``BLEND``) by default. A dense text hit
counts only above ``TEXT_MIN_COSINE``. A clip is aligned in time (``clips.py``). Results come as
``Found``, whose ``missing`` names shards that did not answer (a partial answer). Why:
docs/benchmarks.md, "Design notes moved from docstrings".
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vifusion.catalog import Catalog
from vifusion.config import Config
from vifusion.index.segments import group_segments, group_videos
from vifusion.query._across import across, translations
from vifusion.query.clips import MAX_CLIP_FRAMES, align_clip, decode_clip
from vifusion.query.lexicon import PUNCTUATION, Lexicon
from vifusion.query.ranking import (
    ALIASES,
    BLENDS,
    EVIDENCE_MIN,
    MARKS,
    MODALITIES,
    Candidate,
    Moment,
    blend_lists,
    evidence,
)
from vifusion.types import Found, SearchHit, Segment

if (
    TYPE_CHECKING
):  # a text search from the command line runs without torch, Ray and PyAV (index/local.py)
    from vifusion.extract._text_onnx import TextEmbedder
    from vifusion.extract.model import Embedder
    from vifusion.index import ShardSet
    from vifusion.index.local import LocalShards


GROUP_BY = ("segment", "video", "frame")
BLEND = "calibrated"  # measured better than "rrf": see the module's docstring
# A dense speech or screen hit under this cosine (all-MiniLM-L6-v2) is not about the query:
# unrelated sentences sit at -0.1..0.2, a phrase and the sentence it was said in at 0.5..0.9.
TEXT_MIN_COSINE = 0.25
# The calibrated blend: a cosine of each space mapped linearly to [0, 1] between "unrelated" and
# "as close as a query gets" (ConSE frames: 0.25 unrelated, 0.55 the named object in view).
COSINE_RANGE = {
    "semantic": (0.25, 0.55),
    "speech": (TEXT_MIN_COSINE, 0.8),
    "screen": (TEXT_MIN_COSINE, 0.8),
}
# Words left out of keyword search (they are in nearly every sentence) unless the query is all
# such words: without them a keyword list holds what the query is about, and the query's
# words marked in a snippet are the ones that matter.
STOPWORDS = frozenset(
    """
a an the and or but nor of to in on at by for from with about into onto over under as is are was were be been
being am do does did have has had it its this that these those there here i you he she we they me him her us
them my your his our their what which who whom how when where why not no so than then too very can could will
would shall should may might must just also if
""".split()
)


def check_modalities(modalities) -> tuple[str, ...]:
    """``modalities`` as a tuple in ``MODALITIES`` order ("text" names "screen"); ValueError for
    an unknown or none."""
    given = [ALIASES.get(m, m) if isinstance(m, str) else m for m in modalities]
    unknown = [m for m in given if m not in MODALITIES]
    if unknown or not given:
        raise ValueError(
            f"modalities must be among {', '.join(MODALITIES)}; got {', '.join(map(str, given)) or 'none'}"
        )
    return tuple(m for m in MODALITIES if m in given)


def keywords(query: str) -> str:
    """The words of ``query`` a keyword search looks for: all but ``STOPWORDS``, or all of
    them when that leaves none."""
    words = query.split()
    kept = [w for w in words if w.strip(PUNCTUATION).casefold() not in STOPWORDS]
    return " ".join(kept or words)


class Searcher:
    """Embeds a query, fans it out to every shard, merges the hits and groups them.

    ``group_by``: ``segment`` (moments), ``video`` (each video's best moment) or ``frame``
    (single sampled frames; a speech segment or screen-text span is the smallest moment of
    words). ``videos``: search only these videos (None: all). Results are ``Moment``s.
    """

    def __init__(
        self,
        cfg: Config,
        shards: ShardSet | LocalShards,
        embedder: Embedder | TextEmbedder,
        catalog: Catalog,
    ) -> None:
        """``embedder``: a ``TextEmbedder`` serves text queries only."""
        self.cfg = cfg
        self.shards = shards
        self.embedder = embedder
        self.catalog = catalog
        self.lexicon = Lexicon(cfg.dictionaries)

    def _frames_to_fetch(self, top_k: int) -> int:
        return min(max(top_k * 20, 200), 2000)

    def _group(self, hits: list[SearchHit], top_k: int, group_by: str) -> list[Segment]:
        if group_by == "segment":
            return group_segments(hits, self.cfg.max_segment_gap_s, self.cfg.segment_drop, top_k)
        if group_by == "video":
            return group_videos(hits, top_k)
        if group_by == "frame":
            return [Segment(h.video_id, h.t_start, h.t_end, h.score, 1) for h in hits[:top_k]]
        raise ValueError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")

    def _search(self, space: str, vec: np.ndarray, top_k: int, group_by: str, videos) -> Found:
        hits = self.shards.search(space, vec, self._frames_to_fetch(top_k), videos)
        return Found(_moments(self._group(hits[0], top_k, group_by)), hits.missing)

    def text(
        self,
        query: str,
        top_k: int = 10,
        group_by: str = "segment",
        videos=None,
        modalities=MODALITIES,
        blend: str = BLEND,
    ) -> Found:
        """Moments for a text query in ``modalities`` (any of ``MODALITIES``), blended by
        ``blend`` (one of ``BLENDS``). Each moment says which modalities ``matched`` and,
        where words matched, carries them as its ``snippet`` (the query's words between ``MARKS``).
        Visual alone is one list: its moments keep their cosine scores."""
        if not query.strip():
            raise ValueError("empty text query")
        if "\x00" in query:  # a query is text, as stored text is: PostgreSQL's holds no NUL
            raise ValueError("text query: contains a NUL character")
        modalities = check_modalities(modalities)
        if group_by not in GROUP_BY:
            raise ValueError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")
        if blend not in BLENDS:
            raise ValueError(f"blend must be one of {BLENDS}, got {blend!r}")
        vec = self.embedder.embed_text([query])
        space, seen_vec, shift = self._seen(query, vec)
        if modalities == ("visual",):
            return self._search(space, seen_vec, top_k, group_by, videos)
        lists, missing = self._ranked_lists(
            query, vec, (space, seen_vec, shift), top_k, group_by, videos, modalities
        )
        scored = [_scored(source, ranked, blend) for source, ranked in lists]
        moments = blend_lists(scored, max(1, sum(map(len, scored))), method=blend)
        if group_by == "video":  # the best moment of each video
            seen: set[int] = set()
            moments = [m for m in moments if not (m.video_id in seen or seen.add(m.video_id))]
        return Found(moments[:top_k], missing)

    def ranked_lists(
        self,
        query: str,
        top_k: int = 10,
        group_by: str = "segment",
        videos=None,
        modalities=MODALITIES,
    ) -> tuple[list[tuple[str, list[Candidate]]], set[int]]:
        """The ranked lists a text query is blended from, as (source, candidates) (``SOURCES``
        of ``ranking``), each candidate with its source's raw score (a cosine, or a keyword
        hit's coverage), and the shards that did not answer: what the evidence fit learns from."""
        vec = self.embedder.embed_text([query])
        seen = self._seen(query, vec)
        return self._ranked_lists(
            query, vec, seen, top_k, group_by, videos, check_modalities(modalities)
        )

    def _seen(self, query: str, vec: np.ndarray) -> tuple[str, np.ndarray, float]:
        """What is seen: (the frame space the visual model's text queries search, the query's
        vector there, what to subtract from its cosines before a blend reads them). ConSE's is
        the text model's own space: ``vec`` taken where frames are by the default embedder's
        ``project_query`` (``extract/_seen_query.py``: its cosines run higher than the raw
        vector's, on which the blends were calibrated, by ``shift``); a joint model's text
        tower embeds into ``visual`` (``extract/backbone.py``)."""
        space = getattr(self.embedder, "text_space", "semantic")
        if space != "semantic":
            return space, self.embedder.embed_query([query]), 0.0
        from vifusion.extract._seen_query import shift

        seen_vec = self.embedder.project_query(vec)
        return space, seen_vec, float(shift(vec, seen_vec)[0])

    def _ranked_lists(self, query, vec, seen, top_k, group_by, videos, modalities):
        """``ranked_lists`` with the query's vectors made: ``vec`` (words) and ``seen``
        (``_seen``'s space, vector and shift)."""
        space, seen_vec, shift = seen
        depth = min(max(2 * top_k, 50), 1000)  # candidates per list
        lists: list[tuple[str, list[Candidate]]] = []
        missing: set[int] = set()
        if "visual" in modalities:
            hits = self.shards.search(space, seen_vec, self._frames_to_fetch(top_k), videos)
            missing.update(hits.missing)
            runs = self._group(hits[0], depth, "frame" if group_by == "frame" else "segment")
            seen = [
                Candidate(
                    s.video_id,
                    s.start_s,
                    s.end_s,
                    s.score - shift,
                    "visual",
                )
                for s in runs
            ]
            lists.append(("visual", seen))
        words = keywords(query)
        kinds = [m for m in ("speech", "screen") if m in modalities]
        translated = translations(self.lexicon, self.catalog, words, videos) if kinds else []
        for kind in kinds:
            hits = self.shards.search(kind, vec, depth, videos)
            missing.update(hits.missing)
            near = [h for h in hits[0] if h.score >= TEXT_MIN_COSINE]
            rows = self.catalog.texts_at(
                [(h.video_id, kind, h.row) for h in near], query=words, marks=MARKS
            )
            lists.append(
                (
                    f"{kind}_dense",
                    [
                        Candidate(
                            r.video_id,
                            r.start_s,
                            r.end_s,
                            h.score,
                            kind,
                            r.snippet,
                            r.snippet_english,
                            r.language if kind == "speech" else None,
                        )
                        for h in near
                        if (r := rows.get((h.video_id, kind, h.row))) is not None
                    ],
                )
            )
            found = self.catalog.keyword_search(
                words, kinds=[kind], video_ids=videos, limit=depth, marks=MARKS
            )
            found = across(self.catalog, kind, found, translated, videos, depth)
            lists.append(
                (
                    f"{kind}_keyword",
                    [
                        Candidate(
                            r.video_id,
                            r.start_s,
                            r.end_s,
                            r.coverage,
                            kind,
                            r.snippet,
                            r.snippet_english,
                            r.language if kind == "speech" else None,
                        )
                        for r in found
                    ],
                )
            )
        return lists, missing

    def image(
        self, image: np.ndarray, top_k: int = 10, group_by: str = "segment", videos=None
    ) -> Found:
        """``image``: (H, W, 3) uint8 RGB."""
        visual, _ = self.embedder.embed_images([image])
        return self._search("visual", visual, top_k, group_by, videos)

    def clip(self, path: Path, top_k: int = 10, group_by: str = "segment", videos=None) -> Found:
        """Moments that match a video clip (its first ``MAX_CLIP_FRAMES`` sampled frames).
        ClipRefused for a clip too long or too costly to decode (see ``decode_clip``)."""
        spans: list[tuple[int, float, float]] = []
        vectors = []
        for frames, batch_spans in decode_clip(Path(path), self.cfg):
            visual, _ = self.embedder.embed_frames(frames)
            vectors.append(visual)
            spans.extend(batch_spans)
        return self._align(np.concatenate(vectors), spans, top_k, group_by, videos)

    def stored_clip(
        self,
        video_id: int,
        start_s: float,
        end_s: float,
        top_k: int = 10,
        group_by: str = "segment",
        videos=None,
    ) -> Found:
        """Moments that match a stretch of an indexed video, from its stored vectors (no
        decode): at most ``MAX_CLIP_FRAMES`` of its frames, spread over the stretch (the
        shard reads no more, however long the stretch)."""
        if not 0 <= start_s < end_s:
            raise ValueError(f"need 0 <= start_s < end_s, got {start_s}, {end_s}")
        times, vectors = self.shards.frames("visual", video_id, start_s, end_s, MAX_CLIP_FRAMES)
        if not len(times):
            raise ValueError(
                f"video {video_id} has no indexed frames between {start_s} s and {end_s} s"
            )
        spans = [(i, float(t0), float(t1)) for i, (t0, t1) in enumerate(times)]
        return self._align(vectors, spans, top_k, group_by, videos)

    def _align(self, queries: np.ndarray, spans, top_k: int, group_by: str, videos) -> Found:
        if group_by not in GROUP_BY:
            raise ValueError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")
        per_frame = self.shards.search("visual", queries, self._frames_to_fetch(top_k), videos)
        moments = align_clip(per_frame, spans, self.cfg.sample_interval_s, len(per_frame[0]) or 1)
        if group_by == "video":  # the best moment of each video
            seen: set[int] = set()
            moments = [m for m in moments if not (m.video_id in seen or seen.add(m.video_id))]
        return Found(_moments(moments[:top_k]), per_frame.missing)


def _moments(segments: list[Segment]) -> list[Moment]:
    """Moments of frames (found by their looks, no words)."""
    return [
        Moment(s.video_id, s.start_s, s.end_s, s.score, ["visual"], None, s.frames)
        for s in segments
    ]


def _scored(source: str, ranked: list[Candidate], blend: str) -> list[Candidate]:
    """``ranked`` (raw scores) as ``blend`` adds them up: rrf reads ranks only; calibrated maps
    a cosine to [0, 1] (``COSINE_RANGE``; a keyword hit's coverage is one already); evidence
    to a probability of relevance. A hit mapped to "unrelated" (calibrated 0, evidence under
    ``EVIDENCE_MIN``) neither makes a moment nor counts as matched."""
    if blend == "rrf":
        return ranked
    if blend == "evidence":
        scored = [
            replace(c, score=evidence(source, c.score, rank))
            for rank, c in enumerate(ranked, start=1)
        ]
        return [c for c in scored if c.score >= EVIDENCE_MIN]
    if source.endswith("_keyword"):
        return ranked
    space = "semantic" if source == "visual" else source.removesuffix("_dense")
    scored = [replace(c, score=_calibrate(space, c.score)) for c in ranked]
    return [c for c in scored if c.score > 0] if source == "visual" else scored


def _calibrate(space: str, cosine: float) -> float:
    """A cosine of ``space`` as a share of [0, 1] (``COSINE_RANGE``)."""
    lo, hi = COSINE_RANGE[space]
    return min(max((cosine - lo) / (hi - lo), 0.0), 1.0)
