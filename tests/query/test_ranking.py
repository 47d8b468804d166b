"""Fusing ranked lists of moments from several modalities into one ranking."""

import pytest

from vifusion.query.ranking import (
    MARKS,
    SOURCES,
    Candidate,
    blend_lists,
    bracketed,
    evidence,
    snippet_fields,
)


def c(video, start, end, modality, score=1.0, snippet=None):
    return Candidate(video, start, end, score, modality, snippet)


def test_a_moment_two_modalities_agree_on_beats_the_top_of_one_list():
    visual = [c(1, 0, 4, "visual"), c(2, 10, 14, "visual")]
    speech = [
        c(3, 0, 2, "speech", snippet="hello"),
        c(2, 11, 13, "speech", snippet="the <b>rocket</b>"),
    ]
    top = blend_lists([visual, speech], top_k=3)
    # the moment spans the spoken words, which place it more exactly than the frames
    assert (top[0].video_id, top[0].start_s, top[0].end_s) == (2, 11, 13)
    assert top[0].matched == ["visual", "speech"]
    assert top[0].snippet == "the <b>rocket</b>"
    assert {m.video_id for m in top[1:]} == {1, 3}


def test_overlapping_candidates_of_one_video_merge_and_others_stay_apart():
    speech = [
        c(1, 5, 8, "speech", snippet="a"),
        c(1, 7, 9, "speech", snippet="b"),
        c(1, 20, 22, "speech"),
        c(2, 5, 8, "speech"),
        c(2, 8, 10, "speech"),
    ]
    top = blend_lists([speech], top_k=10)
    # a moment spans its strongest candidate; spans that only touch stay apart
    spans = sorted((m.video_id, m.start_s, m.end_s, m.snippet) for m in top)
    assert spans == [(1, 5, 8, "a"), (1, 20, 22, None), (2, 5, 8, None), (2, 8, 10, None)]


def test_a_moment_of_frames_takes_the_span_of_the_words_that_join_it():
    visual = [c(1, 0, 30, "visual")]
    speech = [c(1, 14, 16, "speech", snippet="the [budget] is up")]
    screen = [c(1, 20, 28, "screen", snippet="Q3 [budget]")]
    top, other = blend_lists([visual, speech, screen], top_k=5)
    assert (top.start_s, top.end_s, top.snippet, top.matched) == (
        14,
        16,
        "the [budget] is up",
        ["visual", "speech"],
    )
    # the slide shares time with the frames but not with the words that placed their moment
    assert (other.start_s, other.end_s, other.matched) == (20, 28, ["screen"])


def test_the_calibrated_blend_weighs_how_good_each_match_is():
    # one strong spoken match against two weak ones that agree on another moment
    speech = [c(1, 0, 2, "speech", 0.9, "x")]
    visual = [c(2, 0, 4, "visual", 0.3)]
    screen = [c(2, 1, 3, "screen", 0.2, "y")]
    rrf = blend_lists([speech, visual, screen], top_k=2)
    assert [m.video_id for m in rrf] == [2, 1]  # ranks only: two lists beat one
    calibrated = blend_lists([speech, visual, screen], top_k=2, method="calibrated")
    assert [m.video_id for m in calibrated] == [1, 2]
    assert [m.score for m in calibrated] == pytest.approx([0.9, 0.5])
    with pytest.raises(ValueError, match="blend"):
        blend_lists([speech], top_k=1, method="max")


def test_a_list_counts_once_per_moment():
    # Two candidates of the same moment in one list add one term, not two.
    one = blend_lists([[c(1, 0, 2, "visual"), c(1, 1, 3, "visual"), c(2, 0, 2, "visual")]], top_k=2)
    assert one[0].score == pytest.approx(1 / 61)


def test_join_gap_joins_near_spans_and_top_k_cuts():
    top = blend_lists([[c(1, 0, 2, "screen"), c(1, 2.5, 4, "screen")]], top_k=5, join_gap_s=1.0)
    assert [(m.start_s, m.end_s) for m in top] == [(0, 2)]
    assert len(blend_lists([[c(1, 0, 2, "screen"), c(1, 2.5, 4, "screen")]], top_k=5)) == 2
    # an instant (a zero-length span) joins the moment it falls in
    assert (
        len(blend_lists([[c(1, 0, 2, "visual")], [c(1, 2, 2, "speech", snippet="x")]], top_k=5))
        == 1
    )
    with pytest.raises(ValueError):
        blend_lists([], top_k=0)


def test_a_snippet_keeps_literal_brackets_as_text_and_gives_the_marked_words_as_spans():
    marked = f"arr[i] = {MARKS[0]}total{MARKS[1]} + {MARKS[0]}x{MARKS[1]}"
    fields = snippet_fields(marked)
    assert fields == {
        "snippet": "arr[i] = total + x",
        "highlights": [[9, 14], [17, 18]],
        "snippet_english": None,  # no English rendering: said in English, or not translated
        "highlights_english": [],
    }
    assert bracketed(fields["snippet"], fields["highlights"]) == "arr[i] = [total] + [x]"
    assert snippet_fields(None)["snippet"] is None


def test_evidence_rises_with_the_raw_score_and_is_a_probability():
    for source in SOURCES:
        p = [evidence(source, raw / 20) for raw in range(-4, 21)]
        assert all(0 < a < b < 1 for a, b in zip(p, p[1:])), source


def test_under_evidence_lists_of_weak_hits_add_little_beside_a_strong_hit():
    def hit(source, video, raw, modality, snippet=None):
        return Candidate(video, 0, 4, evidence(source, raw), modality, snippet)

    # video 1: the named object plainly in view; video 2: what is said and what is written
    # there are only near the query in meaning (a caption with "bird" for "a cockatoo"), each
    # the top of its list
    seen = [hit("visual", 1, 0.6, "visual")]
    said = [hit("speech_dense", 2, 0.3, "speech", "a")]
    shown = [hit("screen_dense", 2, 0.3, "screen", "b")]
    top = blend_lists([seen, said, shown], top_k=2, method="evidence")
    assert [m.video_id for m in top] == [1, 2]
    assert top[1].matched == ["speech", "screen"]
    # ranks alone cannot tell: two lists' first places beat one's
    assert blend_lists([seen, said, shown], top_k=1, method="rrf")[0].video_id == 2


def test_under_evidence_agreeing_lists_raise_a_moment_by_noisy_or():
    a, b = evidence("speech_dense", 0.5), evidence("speech_keyword", 0.5)
    one = [Candidate(1, 0, 4, a, "speech", "x")]
    two = [Candidate(2, 0, 4, a, "speech", "y")], [Candidate(2, 1, 3, b, "speech", "y")]
    top = blend_lists([one, *two], top_k=2, method="evidence")
    assert [m.video_id for m in top] == [2, 1]
    assert top[0].score == pytest.approx(1 - (1 - a) * (1 - b))
    assert top[1].score == pytest.approx(a)
