"""The extractor: a Ray actor that turns one video at a time into frame features, and what is
said and written in it into text rows.

decode -> embed -> hand to the node's aggregator, as a pipeline (decoding runs ahead in a
thread, one hand-over in flight while the next frames are embedded), on a GPU where the
cluster has one. Screen text is read on the sampled frames as they pass
(``ScreenTextTracker``) and the audio transcribed on its own thread; each speech segment
and screen-text span is embedded with the query text model and handed over like the frames,
before the video's ``finish``, and its words go back to the driver in ``texts`` events. Bad
audio is a ``warning``, never a failure. Speech and OCR models load once per actor.
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import ray
from ray.actor import ActorHandle

from vifusion._files import storage_reason
from vifusion.cluster.placement import extractor_options, extractors_a_node, planned_extractors
from vifusion.config import Config
from vifusion.fusion import AggregatorLost, Handoff
from vifusion.types import FusedBatch

EMBED_SIDE = 224  # short side of the frames the embedder takes (it crops 224 x 224)
_TEXT_ROWS_PER_HANDOVER = (
    256  # a text row is a frame-wide row (zero visual columns): ~1.7 MB per 256
)
# (start_s, end_s, text) of a video's rows of one kind; speech rows add (language, english)
TextRows = list[tuple]


class Extractor:
    """Indexes videos through its node's aggregator (``aggregators``: by node id). One video at a time."""

    def __init__(self, cfg: Config, aggregators: dict[str, ActorHandle], sharing: int = 1) -> None:
        """``sharing``: the extractors on this node, this one counted. Each takes its share of
        the node's cores for torch: two extractors each spinning a thread a core cost 1.6x
        the CPU a frame of two with a thread each (docs/benchmarks.md)."""
        import torch

        from vifusion.extract.backbone import load_backbone

        # Set explicitly: Ray sets OMP_NUM_THREADS=1 in its workers.
        torch.set_num_threads(cfg.torch_threads or max(1, cfg.threads // max(sharing, 1)))
        self.cfg = cfg
        self.sharing = max(sharing, 1)
        self.aggregator = aggregators[ray.get_runtime_context().get_node_id()]
        self.handoff = Handoff(self.aggregator, local=cfg.fusion_local_handoff)
        self.embedder = load_backbone(cfg)  # the visual model cfg.visual_model names
        gpu = self.embedder.device.type == "cuda"
        self.decode_threads = decode_threads(cfg, self.sharing, gpu=gpu)
        self.decode_gpu = decode_on_gpu(cfg, self.sharing, gpu)
        self._transcriber: Any = None  # speech.Transcriber, loaded by the first video with sound
        self._screen: Any = None  # screentext.ScreenReader, loaded by the first video read
        self.people = None
        if cfg.people:
            from vifusion.extract.people import PeopleDetector

            self.people = PeopleDetector()
        self._speech_thread = ThreadPoolExecutor(1, thread_name_prefix="speech")

    def device(self) -> str:
        return str(self.embedder.device)

    def node_id(self) -> str:
        """The Ray node this extractor runs on (a video on another node is shipped to it)."""
        return ray.get_runtime_context().get_node_id()

    def transcriber(self):  # -> speech.Transcriber
        """The speech model, loaded at the first call: on this actor's GPU where CTranslate2
        can use it, else on the CPU."""
        if self._transcriber is None:
            from vifusion.extract.speech import Transcriber, speech_device

            gpu = self.embedder.device.type == "cuda"
            self._transcriber = Transcriber(self.cfg, speech_device() if gpu else "cpu")
        return self._transcriber

    def screen(self):  # -> screentext.ScreenReader
        """The OCR models, loaded at the first call: CUDA where onnxruntime has it and this
        actor has a GPU, else the CPU."""
        if self._screen is None:
            from vifusion.extract.screentext import ScreenReader, ocr_device

            gpu = self.embedder.device.type == "cuda"
            self._screen = ScreenReader(self.cfg, ocr_device() if gpu else "cpu")
        return self._screen

    def index_video(
        self,
        video_id: int,
        path: str,
        shard_no: int,
        follow_symlinks: bool = True,
        chunks: list[ray.ObjectRef] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Streams events: ``probed`` (video info); ``stage`` (``frames``: decoding and embedding
        the frames, reading their screen text; ``speech``: transcribing; ``saving``: waiting for
        the shard); ``progress`` (frames done / total); ``warning`` (one line: what happened to
        the audio); ``texts`` (one per kind, ``speech`` and ``screen``: every (start_s, end_s,
        text) row, numbered as their vectors are, for ``Catalog.put_texts``); then ``done``
        (frames indexed) or ``failed`` (reason). Every row of a ``done`` video (frames, speech
        segments, screen-text spans) has been acknowledged by its shard, and the ``texts``
        came before it. ``follow_symlinks``: see ``open_regular``. ``chunks``: the file,
        shipped from another node (``_spool.py``); ``path`` then only names it."""
        if chunks is not None:
            from vifusion.extract._spool import received

            with received(chunks, Path(path).name) as local:
                yield from self.index_video(video_id, str(local), shard_no)
            return
        from vifusion.extract._prefetch import prefetch
        from vifusion.extract.decode import (
            DecodeError,
            open_sampled,
            open_sampled_with_text,
            open_video,
        )

        name = Path(path).name
        cfg = self.cfg
        try:
            with open_video(Path(path), follow_symlinks) as file:
                # Each sampled frame decoded once, leaving the decoder at the embedder's size
                # and, where screen text is read, at a size to read it.
                if cfg.screen_text:
                    info, total, batches = open_sampled_with_text(
                        Path(path),
                        cfg.sample_fps,
                        cfg.max_frames,
                        EMBED_SIDE,
                        cfg.ocr_frame_side,
                        cfg.embed_batch,
                        file=file,
                        threads=self.decode_threads,
                        gpu=self.decode_gpu,
                    )
                else:
                    info, total, plain = open_sampled(
                        Path(path),
                        cfg.sample_fps,
                        cfg.max_frames,
                        EMBED_SIDE,
                        cfg.embed_batch,
                        file=file,
                        threads=self.decode_threads,
                        gpu=self.decode_gpu,
                    )
                    batches = ((frames, spans, frames) for frames, spans in plain)
                yield {
                    "event": "probed",
                    "duration_s": info.duration_s,
                    "fps": info.fps,
                    "width": info.width,
                    "height": info.height,
                    "frames_total": total,
                }
                with self._hearing(Path(path), file) as heard:
                    yield {"event": "stage", "stage": "frames"}
                    tracker = self.screen().track() if cfg.screen_text else None
                    faces = self.people.track(cfg.people_backoff_max) if self.people else None
                    shown = []
                    done, handing, instance = 0, None, None
                    self.handoff.reset()
                    for frames, spans, text_frames in prefetch(batches):
                        terms = faces.terms(frames) if faces else None
                        visual, semantic = self.embedder.embed_frames(frames, terms)
                        batch = FusedBatch.of_video(
                            video_id, done, [(t0, t1) for _, t0, t1 in spans], visual, semantic
                        )
                        done += len(batch)
                        if handing is not None:
                            instance = _same(
                                instance, handing.result()
                            )  # back-pressure reaches this actor here
                        handing = self.handoff.submit(shard_no, batch, time.time())
                        if tracker is not None:  # read while the frames' hand-over travels
                            for rgb, small, (_, t0, t1) in zip(text_frames, frames, spans):
                                shown += tracker.add(rgb, t0, t1, small=small)
                        yield {"event": "progress", "frames_done": done, "frames_total": total}
                    if tracker is not None:
                        shown += tracker.finish()
                        if (dropped := tracker.warning()) is not None:
                            yield {"event": "warning", "warning": dropped}
                    texts: dict[str, TextRows] = {
                        "screen": sorted((s.start_s, s.end_s, s.text) for s in shown),
                        "speech": [],
                    }
                    language = None  # the video's spoken language, once transcribed
                    if heard is not None:
                        yield {"event": "stage", "stage": "speech"}
                        transcript = heard.result()
                        texts["speech"] = [
                            (s.start_s, s.end_s, s.text, s.language, s.english)
                            for s in transcript.segments
                        ]
                        language = transcript.language
                        if transcript.reason is not None:
                            yield {"event": "warning", "warning": transcript.reason}
            yield {"event": "stage", "stage": "saving"}
            for kind, rows in texts.items():
                for batch in self._text_batches(video_id, kind, rows):
                    if handing is not None:
                        instance = _same(instance, handing.result())
                    handing = self.handoff.submit(shard_no, batch, time.time())
            if handing is not None:
                instance = _same(instance, handing.result())
            _same(instance, ray.get(self.aggregator.finish.remote(video_id))[1])
            if done == 0:
                raise DecodeError(f"{name}: no frames could be decoded")
            for kind, rows in texts.items():
                yield {"event": "texts", "kind": kind, "rows": rows, "language": language}
            yield {"event": "done", "frames": done}
        except DecodeError as e:
            self._abandon(video_id)
            yield {"event": "failed", "error": str(e)}
        except (
            AggregatorLost,
            ray.exceptions.RayActorError,
        ) as e:  # not the video's fault: worth a retry
            yield {"event": "failed", "error": f"{name}: {_reason(e)}", "retry": True}
        except Exception as e:  # a bug, a dead shard or a full disk fails this video, not the actor
            self._abandon(video_id)
            yield {
                "event": "failed",
                "error": f"{name}: {_reason(e)}",
                "storage": storage_reason(e),
            }

    @contextlib.contextmanager
    def _hearing(self, path: Path, file: io.FileIO) -> Iterator[Future | None]:
        """The video's audio transcribed on the speech thread while the caller does its frames
        (on other cores, or the GPU): a Future of its ``Transcript``, None where speech is off.
        On leaving, an unfinished transcription is stopped and waited for, so the file stays
        open for it and one video's never runs into the next's."""
        if not self.cfg.speech:
            yield None
            return
        from vifusion._files import fd_path
        from vifusion.extract.audio import AudioReader
        from vifusion.extract.speech import transcribe_audio

        stop = threading.Event()
        reader = AudioReader(path, self.cfg.audio_max_s, src=fd_path(file.fileno()))
        heard = self._speech_thread.submit(transcribe_audio, reader, self.transcriber, stop)
        try:
            yield heard
        finally:
            stop.set()
            wait([heard])

    def _text_batches(self, video_id: int, kind: str, rows: TextRows) -> Iterator[FusedBatch]:
        """``rows`` embedded with the query model, as row batches numbered 0 onwards. A row with
        an English rendering is embedded with it: the query model reads English, so an
        English query finds the meaning of a sentence said in another language."""
        for first in range(0, len(rows), _TEXT_ROWS_PER_HANDOVER):
            part = rows[first : first + _TEXT_ROWS_PER_HANDOVER]
            said = [" ".join(filter(None, (r[2], *r[4:5]))) for r in part]
            vectors = self.embedder.embed_text(said)
            yield FusedBatch.of_texts(video_id, kind, first, [r[:2] for r in part], vectors)

    def _abandon(self, video_id: int) -> None:
        """Drop a failed video's unsent frames and settle its sends; the driver then
        deletes whatever of it reached the shard."""
        self.handoff.settle()
        ray.get(self.aggregator.abandon.remote(video_id))


def decode_threads(cfg: Config, sharing: int, gpu: bool) -> int:
    """Codec threads per extractor: ``cfg.decode_threads``, or where 0, the extractor's share
    of the node's cores when the model runs on a GPU (the cores are then the decoder's), and 1
    on the CPU, where torch's threads take those cores and a second decoding thread only
    waits for one."""
    if cfg.decode_threads:
        return cfg.decode_threads
    return max(1, cfg.threads // sharing) if gpu else 1


def decode_on_gpu(cfg: Config, sharing: int, gpu: bool) -> bool:
    """Whether an extractor decodes on its GPU's video engine (NVDEC): where its model runs on
    the GPU and it is its node's only extractor. Several extractors, each with its own NVDEC
    sessions and copies back, decode slower there than on their cores."""
    return gpu and cfg.decode_gpu and sharing == 1


def _same(instance: str | None, now: str) -> str:
    if instance is not None and now != instance:
        raise AggregatorLost("the node aggregator restarted and lost rows it held")
    return now


def _reason(e: Exception) -> str:
    # A failure inside the aggregator arrives wrapped; its own message is the reason.
    if isinstance(e, ray.exceptions.RayTaskError) and e.cause is not None:
        e = e.cause
    return f"{type(e).__name__}: {e}"


def start_extractors(cfg: Config, aggregators: dict[str, ActorHandle]) -> list[ActorHandle]:
    """``cfg.num_extractors`` actors, on GPUs where the cluster has them; or those an applied
    plan places, each on its node (``placement.py``)."""
    # max_restarts: a dead extractor comes back (models reloaded); the indexer retries its video.
    cls = ray.remote(Extractor)
    planned = planned_extractors(cfg.plan)
    if planned:
        return [
            cls.options(**options, max_restarts=-1).remote(cfg, aggregators, sharing)
            for options, sharing in planned
        ]
    cls = cls.options(**extractor_options(cfg.num_extractors), max_restarts=-1)
    sharing = extractors_a_node(cfg.num_extractors)
    return [cls.remote(cfg, aggregators, sharing) for _ in range(cfg.num_extractors)]
