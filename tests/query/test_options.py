"""What a search may ask for (query/options.py) and the frame a thumbnail time shows
(query/thumbnails.frame_time), checked without a service: what Service.search and
Service.thumbnail refuse before anything runs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from vifusion.query.options import MAX_OFFSET, check_search
from vifusion.query.thumbnails import PastEnd, frame_time

OK = dict(queries=1, text=True, top_k=10, group_by="segment", offset=0, min_relative_score=0.5)


@pytest.mark.parametrize(
    "change, says",
    [
        (dict(queries=0), "give exactly one of text, image, clip"),
        (dict(queries=2), "give exactly one of text, image, clip"),
        (dict(top_k=0), "top_k must be between 1 and 100, got 0"),
        (dict(top_k=101), "top_k must be between 1 and 100, got 101"),
        (dict(group_by="scene"), "group_by must be one of segment, video, frame"),
        (dict(offset=MAX_OFFSET + 1), f"cursor goes past result {MAX_OFFSET}"),
        (dict(min_relative_score=1.5), "min_relative_score must be between 0 and 1, got 1.5"),
    ],
)
def test_a_search_asking_too_much_is_refused_saying_what(change, says):
    with pytest.raises(ValueError, match=says):
        check_search(**{**OK, **change}, modalities=("visual",))


def test_an_image_or_clip_search_must_look_at_what_is_seen():
    with pytest.raises(ValueError, match="its modalities must include visual"):
        check_search(**{**OK, "text": False}, modalities=("speech",))
    assert check_search(**OK, modalities=("speech",)) == ("speech",)


def test_a_thumbnail_time_past_the_end_is_refused_and_the_last_frame_shows_to_the_end():
    video = SimpleNamespace(id=7, duration_s=10.0, fps=25.0)
    with pytest.raises(PastEnd, match="t=10.5 s is past the end of video 7"):
        frame_time(video, 10.5)
    assert frame_time(video, 10.0) == pytest.approx(9.96)
    assert frame_time(video, 3.0) == 3.0
    assert frame_time(SimpleNamespace(id=8, duration_s=None, fps=None), 99.0) == 99.0
