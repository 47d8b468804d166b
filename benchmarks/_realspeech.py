"""Real voices in many languages, from recordings that ship in a package (never committed).

KDE's ``ktuberling`` (Debian ``ktuberling-data``, GPL-2+) ships the words of its potato-face
toy recorded by people in two dozen languages. Thirteen are recorded in every language that
``benchmarks/multilingual.py`` speaks: the parts and things of a face (``WORDS``). ``fetch()``
downloads the package into ``~/.cache/vifusion-dev/`` once (``apt-get download`` + ``dpkg -x``;
nothing is installed) and ``recordings(lang)`` reads one language's words as float32 mono at
the talks' rate, each with its English name (the package's) and the word as written in that
language, typed without accents (checked against what Whisper base hears, forced to the
language, 2026-11-29).

Run ``python benchmarks/_realspeech.py`` to fetch and print what each file says.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from _realmedia import CACHE, fetch_once

DEB = "ktuberling-data"
SOUNDS = "usr/share/ktuberling/sounds"

# English name -> the word as written in each language (accents dropped, as a user types).
WORDS: dict[str, dict[str, str]] = {
    "eye": {"es": "ojo", "fr": "oeil", "de": "Auge", "it": "occhio", "pt": "olho", "ru": "глаз"},
    "eyebrow": {
        "es": "ceja",
        "fr": "sourcil",
        "de": "Augenbraue",
        "it": "sopracciglio",
        "pt": "sobrancelha",
        "ru": "бровь",
    },
    "nose": {"es": "nariz", "fr": "nez", "de": "Nase", "it": "naso", "pt": "nariz", "ru": "нос"},
    "ear": {
        "es": "oreja",
        "fr": "oreille",
        "de": "Ohr",
        "it": "orecchio",
        "pt": "orelha",
        "ru": "ухо",
    },
    "mouth": {"es": "boca", "fr": "bouche", "de": "Mund", "it": "bocca", "pt": "boca", "ru": "рот"},
    "hat": {
        "es": "sombrero",
        "fr": "chapeau",
        "de": "Hut",
        "it": "cappello",
        "pt": "chapeu",
        "ru": "шапка",
    },
    "moustache": {
        "es": "bigote",
        "fr": "moustache",
        "de": "Schnurrbart",
        "it": "baffi",
        "pt": "bigode",
        "ru": "усы",
    },
    "sunglasses": {
        "es": "gafas de sol",
        "fr": "lunettes de soleil",
        "de": "Sonnenbrille",
        "it": "occhiali da sole",
        "pt": "oculos de sol",
        "ru": "солнечные очки",
    },
    "spectacles": {
        "es": "anteojos",
        "fr": "lunettes",
        "de": "Brille",
        "it": "occhiali",
        "pt": "oculos",
        "ru": "очки",
    },
    "tie": {"fr": "cravate", "de": "Krawatte", "it": "cravatta", "pt": "gravata", "ru": "галстук"},
    "hair": {
        "es": "pelo",
        "fr": "cheveux",
        "de": "Haare",
        "it": "capelli",
        "pt": "cabelo",
        "ru": "волосы",
    },
}


@dataclass(frozen=True)
class Recording:
    """One recorded word: ``english`` its name, ``written`` the word in its language."""

    english: str
    written: str
    samples: np.ndarray  # float32 mono at ``rate``


def fetch(cache: Path = CACHE) -> Path:
    """The unpacked package under ``cache``/speech-pkg, downloaded once."""
    return fetch_once(cache / "speech-pkg", (DEB,))


def recordings(language: str, rate: int, cache: Path = CACHE) -> list[Recording]:
    """``language``'s recorded words of ``WORDS``, in ``WORDS``' order (one file said once:
    Spanish records "tie" and "bow" as one word, so "tie" is left out there)."""
    import av

    sounds = fetch(cache) / SOUNDS
    theme = (sounds / f"{language}.soundtheme").read_text(encoding="utf-8")
    files = dict(re.findall(r'<sound name="([^"]+)"\s+file="([^"]+)"', theme))
    out = []
    for english, written in WORDS.items():
        if language not in written:
            continue
        with av.open(str(sounds / files[english])) as f:
            resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
            pcm = [
                frame.to_ndarray().reshape(-1)
                for packet in f.decode(audio=0)
                for frame in resampler.resample(packet)
            ]
            pcm += [frame.to_ndarray().reshape(-1) for frame in resampler.resample(None)]
        out.append(Recording(english, written[language], np.concatenate(pcm).astype(np.float32)))
    return out


def main() -> int:
    """Fetch, and print what Whisper base hears in each word (the written words' check)."""
    from vifusion.config import Config
    from vifusion.extract.speech import Transcriber

    model = Transcriber(Config(), "cpu").model
    for lang in ("es", "fr", "de", "it", "pt", "ru"):
        for r in recordings(lang, 16_000):
            pieces, _ = model.transcribe(r.samples, language=lang, temperature=0.0)
            heard = " ".join(p.text.strip() for p in pieces)
            print(f"{lang} {r.english:11} {r.written:20} {len(r.samples) / 16_000:4.1f} s  {heard}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
