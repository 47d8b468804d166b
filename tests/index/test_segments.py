from __future__ import annotations

import pytest

from vifusion.index.segments import group_segments, group_videos
from vifusion.types import SearchHit, Segment


def hits(video: int, scores_by_second: dict[int, float]) -> list[SearchHit]:
    """Hits for 1-second frames starting at the given seconds."""
    return [SearchHit(video, float(t), float(t + 1), s) for t, s in scores_by_second.items()]


@pytest.mark.parametrize(
    "scores, max_gap_s, drop, spans",
    [
        # the order of the input does not matter
        ({12: 0.80, 10: 0.81, 11: 0.83, 13: 0.79}, 0.5, 0.05, [(10.0, 14.0, 0.83, 4)]),
        ({0: 0.7, 1: 0.7, 5: 0.9, 6: 0.88}, 1.5, 0.1, [(5.0, 7.0, 0.9, 2), (0.0, 2.0, 0.7, 2)]),
        # frames 2..4 missing = 3 s
        ({0: 0.7, 1: 0.7, 5: 0.9, 6: 0.88}, 3.0, 0.5, [(0.0, 7.0, 0.9, 4)]),
        # the gap between 1.0 and 2.0 is exactly 1.0
        ({0: 0.5, 2: 0.5}, 1.0, 0.1, [(0.0, 3.0, 0.5, 2)]),
        (
            {0: 0.90, 1: 0.87, 2: 0.70, 3: 0.71},
            0.5,
            0.05,
            [(0.0, 2.0, 0.9, 2), (2.0, 4.0, 0.71, 2)],
        ),
        # 0.75 is exactly peak * (1 - drop)
        ({0: 1.0, 1: 0.75}, 0.5, 0.25, [(0.0, 2.0, 1.0, 2)]),
    ],
    ids=[
        "consecutive-frames-form-one",
        "a-gap-splits",
        "a-wider-gap-allowance-joins",
        "a-gap-equal-to-max-gap-joins",
        "a-score-drop-splits",
        "exactly-the-drop-joins",
    ],
)
def test_frames_join_into_segments_until_a_gap_or_a_score_drop(
    scores: dict[int, float], max_gap_s: float, drop: float, spans: list[tuple]
) -> None:
    """Each segment: (start_s, end_s, its best score, its frames)."""
    got = group_segments(hits(1, scores), max_gap_s=max_gap_s, drop=drop, top_k=5)
    assert got == [Segment(1, *span) for span in spans]


def test_a_peak_does_not_swallow_the_weaker_scene_before_it() -> None:
    # "a cat": a coffee scene (0-4 s) then the cat scene (4-8 s), then something else
    scores = {0: 0.19, 1: 0.18, 2: 0.18, 3: 0.17, 4: 0.54, 5: 0.52, 6: 0.61, 7: 0.57, 8: 0.18}
    first = group_segments(hits(1, scores), max_gap_s=1.5, drop=0.25, top_k=5)[0]
    assert first == Segment(1, 4.0, 8.0, 0.61, 4)


def test_videos_never_share_a_segment_and_top_k_is_respected() -> None:
    h = (
        hits(1, {0: 0.6, 1: 0.6})
        + hits(2, {0: 0.9, 1: 0.9})
        + hits(3, {0: 0.3})
        + hits(1, {20: 0.8})
    )
    all_segments = group_segments(h, max_gap_s=1.0, drop=0.1, top_k=10)
    assert [(s.video_id, s.score) for s in all_segments] == [(2, 0.9), (1, 0.8), (1, 0.6), (3, 0.3)]
    assert group_segments(h, max_gap_s=1.0, drop=0.1, top_k=2) == all_segments[:2]
    assert group_segments([], max_gap_s=1.0, drop=0.1, top_k=2) == []


def test_duplicate_frame_hits_count_once_with_best_score() -> None:
    h = hits(1, {0: 0.5, 1: 0.6}) + hits(1, {1: 0.7})
    assert group_segments(h, max_gap_s=0.5, drop=0.3, top_k=5) == [Segment(1, 0.0, 2.0, 0.7, 2)]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        group_segments([], max_gap_s=-1, drop=0.1, top_k=1)
    with pytest.raises(ValueError):
        group_segments([], max_gap_s=1, drop=0.1, top_k=0)
    with pytest.raises(ValueError):
        group_segments([], max_gap_s=1, drop=1.5, top_k=1)
    with pytest.raises(ValueError):
        group_videos([], top_k=0)


def test_group_videos_one_segment_per_video() -> None:
    h = hits(1, {0: 0.6, 7: 0.8}) + hits(2, {3: 0.9}) + hits(3, {1: 0.1})
    assert group_videos(h, top_k=2) == [Segment(2, 3.0, 4.0, 0.9, 1), Segment(1, 7.0, 8.0, 0.8, 1)]
