"""Fusing ranked lists of moments from several modalities into one ranking."""

import pytest

from vifusion.ranking import Candidate, fuse


def c(video, start, end, modality, score=1.0, snippet=None):
    return Candidate(video, start, end, score, modality, snippet)


def test_a_moment_two_modalities_agree_on_beats_the_top_of_one_list():
    visual = [c(1, 0, 4, "visual"), c(2, 10, 14, "visual")]
    speech = [c(3, 0, 2, "speech", snippet="hello"), c(2, 11, 13, "speech", snippet="the <b>rocket</b>")]
    top = fuse([visual, speech], top_k=3)
    assert (top[0].video_id, top[0].start_s, top[0].end_s) == (2, 10, 14)
    assert top[0].matched == ["visual", "speech"]
    assert top[0].snippet == "the <b>rocket</b>"
    assert {m.video_id for m in top[1:]} == {1, 3}


def test_overlapping_candidates_of_one_video_merge_and_others_stay_apart():
    speech = [c(1, 5, 8, "speech"), c(1, 7, 9, "speech"), c(1, 20, 22, "speech"), c(2, 5, 8, "speech")]
    top = fuse([speech], top_k=10)
    spans = sorted((m.video_id, m.start_s, m.end_s) for m in top)
    assert spans == [(1, 5, 9), (1, 20, 22), (2, 5, 8)]


def test_a_list_counts_once_per_moment():
    # Two candidates of the same moment in one list add one term, not two.
    one = fuse([[c(1, 0, 2, "visual"), c(1, 1, 3, "visual"), c(2, 0, 2, "visual")]], top_k=2)
    assert one[0].score == pytest.approx(1 / 61)


def test_join_gap_joins_touching_spans_and_top_k_cuts():
    top = fuse([[c(1, 0, 2, "screen"), c(1, 2.5, 4, "screen")]], top_k=5, join_gap_s=1.0)
    assert [(m.start_s, m.end_s) for m in top] == [(0, 4)]
    with pytest.raises(ValueError):
        fuse([], top_k=0)
