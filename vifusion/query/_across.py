"""A keyword search across languages: an English query put into each language a searched
video speaks through the installed dictionaries (``Lexicon``), and the rows that say it
there added to a kind's keyword hits."""

from __future__ import annotations

from dataclasses import replace

from vifusion.catalog import Catalog, TextRow
from vifusion.query.lexicon import Lexicon, coverage
from vifusion.query.ranking import MARKS

Translation = tuple[str, list, str]  # language, the query words' slots, the keyword query


def translations(lexicon: Lexicon, catalog: Catalog, words: str, videos) -> list[Translation]:
    """For each language a searched video speaks and a dictionary reaches: (language,
    each query word's slot of itself and its translations (``Lexicon.slots``), the
    keyword query of them). Empty where no dictionary is installed (the catalog is then
    not asked)."""
    languages = lexicon.languages
    if languages:
        languages &= catalog.spoken_languages(videos).keys()
    english = list(dict.fromkeys(words.split()))
    out = []
    for language in sorted(languages):
        slots = lexicon.slots(english, language)
        if not any(len(slot) > 1 for slot in slots):
            continue
        # Each word's commonest translation first: a query past the catalog's term
        # limit loses rare senses, not whole words.
        terms = [s[i] for i in range(max(map(len, slots))) for s in slots if i < len(s)]
        out.append((language, slots, " ".join(dict.fromkeys(terms))))
    return out


def across(
    catalog: Catalog,
    kind: str,
    found: list[TextRow],
    translated: list[Translation],
    videos,
    depth: int,
) -> list[TextRow]:
    """``found`` (``kind`` rows holding the query's words) with the rows that say them in
    another language (``translated``: the query put into each language), each scored by
    its ``coverage`` of the query's words in its own language; the best coverage first
    where any were added. A speech row's language is its own; on-screen text is taken to
    be in the language its video speaks (the reader does not know a line's language; a
    talk's slides are mostly in its speaker's)."""
    best = {(r.video_id, r.n): r for r in found}
    added = False
    for language, slots, query in translated:
        rows = catalog.keyword_search(
            query,
            kinds=[kind],
            video_ids=videos,
            limit=depth,
            marks=MARKS,
            spoken_in=language if kind == "screen" else None,
        )
        for r in rows:
            share = coverage(slots, r.text)
            key = (r.video_id, r.n)
            said_in = r.language if kind == "speech" else language
            if said_in == language and share > (best[key].coverage if key in best else 0):
                best[key], added = replace(r, coverage=share), True
    if not added:
        return found
    return sorted(best.values(), key=lambda r: (-(r.coverage or 0.0), -r.score))
