"""What a search may ask for, checked before anything runs: exactly one query, a page of
1 to ``MAX_TOP_K`` from an offset up to ``MAX_OFFSET``, a known grouping, a relative cut
between 0 and 1, and modalities that hold what is asked (an image or a clip is matched
against what is seen). Each refusal is a ValueError saying what is wrong (a 422)."""

from __future__ import annotations

from collections.abc import Sequence

from vifusion.query.searcher import GROUP_BY, check_modalities

MAX_OFFSET = 1000  # deepest result a cursor can reach
MAX_TOP_K = 100


def check_search(
    queries: int,
    text: bool,
    top_k: int,
    group_by: str,
    offset: int,
    min_relative_score: float,
    modalities: Sequence[str],
) -> tuple[str, ...]:
    """Refuse a search of ``queries`` query kinds given (``text``: one of them is text) that
    asks for more than may be asked; the modalities it searches, checked
    (``check_modalities``)."""
    if queries != 1:
        raise ValueError("give exactly one of text, image, clip, or video_id + start_s + end_s")
    if not 1 <= top_k <= MAX_TOP_K:
        raise ValueError(f"top_k must be between 1 and {MAX_TOP_K}, got {top_k}")
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {', '.join(GROUP_BY)}")
    if not 0 <= offset <= MAX_OFFSET:
        raise ValueError(f"cursor goes past result {MAX_OFFSET}")
    if not 0 <= min_relative_score <= 1:
        raise ValueError(f"min_relative_score must be between 0 and 1, got {min_relative_score}")
    checked = check_modalities(modalities)
    if not text and "visual" not in checked:
        raise ValueError(
            "an image or clip query searches what is seen: its modalities must include visual"
        )
    return checked
