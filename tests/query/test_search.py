from vifusion.query.clips import align_clip
from vifusion.types import SearchHit


def test_clip_alignment_picks_the_offset_most_frames_agree_on():
    # A 3-frame clip cut from video 7 at 10 s. Each clip frame finds its true source
    # frame, but the middle one also likes video 9 a little more than its true frame.
    spans = [(0, 0.0, 1.0), (24, 1.0, 2.0), (48, 2.0, 3.0)]
    per_frame = [
        [SearchHit(7, 10.0, 11.0, 0.90), SearchHit(9, 3.0, 4.0, 0.50)],
        [SearchHit(9, 30.0, 31.0, 0.93), SearchHit(7, 11.0, 12.0, 0.92)],
        [SearchHit(7, 12.0, 13.0, 0.91), SearchHit(9, 5.0, 6.0, 0.40)],
    ]
    best = align_clip(per_frame, spans, interval_s=1.0, top_k=3)
    assert (best[0].video_id, best[0].start_s, best[0].end_s) == (7, 10.0, 13.0)
    assert best[0].frames == 3
    assert abs(best[0].score - (0.90 + 0.92 + 0.91) / 3) < 1e-6
    assert all(s.score <= best[0].score for s in best)


def test_clip_alignment_does_not_return_overlapping_moments_of_one_video():
    spans = [(0, 0.0, 1.0), (24, 1.0, 2.0)]
    per_frame = [
        [SearchHit(1, 5.0, 6.0, 0.9), SearchHit(1, 6.0, 7.0, 0.8)],
        [SearchHit(1, 6.0, 7.0, 0.9), SearchHit(1, 7.0, 8.0, 0.8)],
    ]
    moments = align_clip(per_frame, spans, interval_s=1.0, top_k=5)
    for i, a in enumerate(moments):
        for b in moments[i + 1 :]:
            assert not (a.video_id == b.video_id and a.start_s < b.end_s and b.start_s < a.end_s)


def test_a_query_clip_is_decoded_within_its_caps(tmp_path):
    import pytest

    from tests.media import tiny_frames
    from vifusion.config import Config
    from vifusion.query.clips import ClipRefused, decode_clip

    tiny_frames(tmp_path / "q.mp4", 40, 4)  # 10 s
    spans = [s for _, batch in decode_clip(tmp_path / "q.mp4", Config()) for s in batch]
    assert len(spans) == 10 and spans[-1][2] == 10.0
    with pytest.raises(ClipRefused) as refused:
        list(decode_clip(tmp_path / "q.mp4", Config(max_query_clip_s=9.5)))
    assert (refused.value.status, refused.value.code) == (422, "clip_too_long")
    # A budget no decode can meet: refused once the budget is spent, not after the whole clip.
    with pytest.raises(ClipRefused) as refused:
        list(decode_clip(tmp_path / "q.mp4", Config(query_clip_decode_budget_s=1e-9)))
    assert (refused.value.status, refused.value.code) == (422, "clip_too_costly")
