"""Talks: short videos with real speech and slides of written text at known times, for the
speech and screen-text tests and benchmarks.

Speech is made with espeak-ng (a Debian package; ``have_espeak()`` says whether it is here),
text is drawn with Pillow in DejaVu Sans, taken from matplotlib's wheel so no system font is
needed. Files are written with PyAV: mp4 (H.264, AAC), mkv (H.264, Opus) or webm (VP8, Opus),
as the name's suffix says. The audio can also be silence, music (chords, no words), missing,
or broken (an AAC track whose packets are random bytes).
"""

from __future__ import annotations

import io
import shutil
import subprocess
import wave
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Literal

import av
import numpy as np
from PIL import Image, ImageDraw, ImageFont

ESPEAK = "espeak-ng"
AUDIO_RATE = 48_000  # what Opus takes; AAC too
Audio = Literal["speech", "silence", "music", "none", "broken"]
_CODECS = {
    ".mp4": ("libx264", "aac"),
    ".mkv": ("libx264", "libopus"),
    ".webm": ("libvpx", "libopus"),
}


# espeak-ng's voice for each language a talk can be spoken in (ISO 639-1 -> voice).
VOICES = {
    "en": "en-us",
    "es": "es",
    "fr": "fr-fr",
    "de": "de",
    "it": "it",
    "pt": "pt",
    "ru": "ru",
    "nl": "nl",
    "pl": "pl",
}

# Two sentences per language, the same two meanings in each (what an English query finds
# across languages): how the weather will be tomorrow, and where the train station is.
SENTENCES: dict[str, tuple[str, str]] = {
    "en": (
        "Tomorrow the weather will be sunny and warm in the mountains.",
        "The train station is next to the old market in the city centre.",
    ),
    "es": (
        "Mañana el tiempo será soleado y cálido en las montañas.",
        "La estación de tren está junto al mercado viejo en el centro de la ciudad.",
    ),
    "fr": (
        "Demain le temps sera ensoleillé et chaud dans les montagnes.",
        "La gare est à côté du vieux marché au centre de la ville.",
    ),
    "de": (
        "Morgen wird das Wetter in den Bergen sonnig und warm sein.",
        "Der Bahnhof liegt neben dem alten Markt in der Stadtmitte.",
    ),
    "it": (
        "Domani il tempo sarà soleggiato e caldo in montagna.",
        "La stazione dei treni è vicino al vecchio mercato nel centro della città.",
    ),
    "pt": (
        "Amanhã o tempo vai estar ensolarado e quente nas montanhas.",
        "A estação de comboios fica ao lado do mercado velho no centro da cidade.",
    ),
    "ru": (
        "Завтра в горах будет солнечная и тёплая погода.",
        "Вокзал находится рядом со старым рынком в центре города.",
    ),
}


def voice_of(language: str) -> str:
    """espeak-ng's voice for ``language`` (ISO 639-1): VOICES', else the code itself."""
    return VOICES.get(language, language)


def have_espeak() -> bool:
    """Whether espeak-ng is installed (Debian: ``apt-get install espeak-ng``)."""
    return shutil.which(ESPEAK) is not None


def speak(text: str, voice: str = "en-us", wpm: int = 150) -> np.ndarray:
    """``text`` spoken by espeak-ng: float32 mono at AUDIO_RATE, in [-1, 1]."""
    if not have_espeak():
        raise FileNotFoundError(f"{ESPEAK} is not installed (Debian: apt-get install espeak-ng)")
    wav = subprocess.run(
        [ESPEAK, "-v", voice, "-s", str(wpm), "--stdout", text], check=True, capture_output=True
    ).stdout
    with wave.open(io.BytesIO(wav)) as w:
        rate, pcm = w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), np.int16)
    frame = av.AudioFrame.from_ndarray(pcm[None], format="s16", layout="mono")
    frame.sample_rate = rate
    resampler = av.AudioResampler(format="flt", layout="mono", rate=AUDIO_RATE)
    out = [
        f.to_ndarray().reshape(-1) for f in [*resampler.resample(frame), *resampler.resample(None)]
    ]
    return np.concatenate(out).astype(np.float32)


@lru_cache(maxsize=None)
def font(size: int, bold: bool = False) -> ImageFont.FreeTypeFont:
    """DejaVu Sans (bold) at ``size`` px, from matplotlib's wheel."""
    import matplotlib

    name = "DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf"
    return ImageFont.truetype(
        str(Path(matplotlib.__file__).parent / "mpl-data" / "fonts" / "ttf" / name), size
    )


def slide(
    lines: Sequence[str],
    size: tuple[int, int] = (640, 360),
    font_size: int = 32,
    background: tuple[int, int, int] = (250, 250, 245),
    colour: tuple[int, int, int] = (20, 20, 40),
) -> np.ndarray:
    """A slide: ``lines`` left-aligned from the top, (h, w, 3) uint8 RGB; ``size`` is (w, h)."""
    img = Image.new("RGB", size, background)
    draw = ImageDraw.Draw(img)
    for i, line in enumerate(lines):
        draw.text(
            (size[0] // 16, size[1] // 8 + i * round(font_size * 1.8)),
            line,
            fill=colour,
            font=font(font_size),
        )
    return np.asarray(img)


def music(duration_s: float, seed: int = 0) -> np.ndarray:
    """Chords (three notes each, with a decay) changing twice a second: music without words."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(duration_s * AUDIO_RATE)) / AUDIO_RATE
    out = np.zeros_like(t)
    for k in range(int(np.ceil(duration_s * 2))):
        seg = (t >= k / 2) & (t < (k + 1) / 2)
        root = 220.0 * 2 ** (rng.integers(0, 12) / 12)
        for ratio in (1.0, 1.26, 1.5):
            out[seg] += (
                0.15 * np.sin(2 * np.pi * root * ratio * t[seg]) * np.exp(-4 * (t[seg] - k / 2))
            )
    return out.astype(np.float32)


@dataclass(frozen=True)
class Said:
    """A phrase spoken over [start_s, end_s) (the length of espeak-ng's audio, pauses included)."""

    start_s: float
    end_s: float
    text: str


@dataclass(frozen=True)
class Shown:
    """Lines of text on screen over [start_s, end_s)."""

    start_s: float
    end_s: float
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Talk:
    path: Path
    duration_s: float
    audio: Audio
    said: tuple[Said, ...]
    shown: tuple[Shown, ...]


def _soundtrack(
    audio: Audio,
    duration_s: float,
    said: Sequence[tuple],
    voice: str,
    wpm: int,
    recorded: Sequence[tuple[float, np.ndarray, str]] = (),
) -> tuple[np.ndarray, tuple[Said, ...]]:
    track = np.zeros(round(duration_s * AUDIO_RATE), np.float32)
    placed: list[Said] = []
    if audio == "music":
        track = music(duration_s)
    elif audio in ("speech", "broken"):
        spoken = [
            (start_s, speak(text, voice_of(language[0]) if language else voice, wpm), text)
            for start_s, text, *language in said
        ]
        for start_s, pcm, text in sorted([*spoken, *recorded], key=lambda x: x[0]):
            at = round(start_s * AUDIO_RATE)
            if at + len(pcm) > len(track):
                raise ValueError(f"{text!r} at {start_s} s runs past the end ({duration_s} s)")
            track[at : at + len(pcm)] += pcm
            placed.append(Said(start_s, start_s + len(pcm) / AUDIO_RATE, text))
    return track, tuple(placed)


def write_talk(
    path: Path,
    duration_s: float,
    said: Sequence[tuple[float, str] | tuple[float, str, str]] = (),
    shown: Sequence[tuple[float, float, Sequence[str]]] = (),
    audio: Audio = "speech",
    fps: int = 10,
    size: tuple[int, int] = (640, 360),
    voice: str = "en-us",
    wpm: int = 150,
    audio_start_s: float = 0.0,
    language: str | None = None,
    recorded: Sequence[tuple[float, np.ndarray, str]] = (),
) -> Talk:
    """Write a talk: phrases ``said`` as (start_s, text[, language]), slides ``shown`` as (start_s, end_s,
    lines) over a blank slide; ``audio`` picks the soundtrack (``said`` is spoken only for
    "speech"; "broken": AAC packets of random bytes, in mp4 or mkv). The audio track starts
    ``audio_start_s`` after the video (its phrases' times are on the audio's clock).
    ``language`` (ISO 639-1) speaks it in that language's voice (``VOICES``) over ``voice``;
    a phrase's own language (a talk that switches) speaks that phrase in its voice.
    ``recorded`` places real recordings as (start_s, samples at AUDIO_RATE, what they say)."""
    path = Path(path)
    if path.suffix not in _CODECS:
        raise ValueError(f"{path.name}: suffix must be one of {', '.join(_CODECS)}")
    vcodec, acodec = _CODECS[path.suffix]
    if audio == "broken":
        # AAC's decoder refuses random bytes; Opus's parser drops most of them and its decoder
        # turns the rest into noise, which is not a broken stream to a reader.
        if path.suffix == ".webm":
            raise ValueError(f"{path.name}: broken audio is written as AAC, which webm cannot hold")
        acodec = "aac"
    spoken_by = voice_of(language) if language is not None else voice
    track, placed = _soundtrack(audio, duration_s, said, spoken_by, wpm, recorded)
    slides = [Shown(t0, t1, tuple(lines)) for t0, t1, lines in shown]
    blank = slide([], size)
    pictures = {s: slide(s.lines, size) for s in slides}
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as out:
        video = out.add_stream(vcodec, rate=fps)
        video.width, video.height, video.pix_fmt = size[0], size[1], "yuv420p"
        # One thread each: libvpx's own threading crawled on a busy two-core machine.
        video.thread_count = 1
        video.options = (
            {"preset": "veryfast"}
            if vcodec == "libx264"
            else {"deadline": "realtime", "cpu-used": "16"}
        )
        sound = None if audio == "none" else out.add_stream(acodec, rate=AUDIO_RATE, layout="mono")
        for i in range(round(duration_s * fps)):
            t = i / fps
            now = next((s for s in slides if s.start_s <= t < s.end_s), None)
            frame = av.VideoFrame.from_ndarray(pictures[now] if now else blank, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            out.mux(video.encode(frame))
        out.mux(video.encode(None))
        if sound is not None:
            _write_audio(out, sound, track, broken=audio == "broken", start_s=audio_start_s)
    return Talk(path, duration_s, audio, placed, tuple(slides))


def _write_audio(
    out: av.container.OutputContainer,
    stream: av.audio.stream.AudioStream,
    track: np.ndarray,
    broken: bool,
    start_s: float,
) -> None:
    rng = np.random.default_rng(1)
    step = 960  # 20 ms; PyAV re-cuts frames to the encoder's own frame size
    packets: list[av.Packet] = []
    for at in range(0, len(track), step):
        frame = av.AudioFrame.from_ndarray(track[None, at : at + step], format="flt", layout="mono")
        frame.sample_rate, frame.time_base = AUDIO_RATE, Fraction(1, AUDIO_RATE)
        frame.pts = at + round(start_s * AUDIO_RATE)
        packets += stream.encode(frame)
    packets += stream.encode(None)
    for packet in packets:
        if broken:
            junk = av.Packet(rng.integers(0, 256, packet.size, dtype=np.uint8).tobytes())
            junk.pts, junk.dts, junk.duration = packet.pts, packet.dts, packet.duration
            junk.time_base = packet.time_base
            junk.stream = stream
            packet = junk
        out.mux(packet)
