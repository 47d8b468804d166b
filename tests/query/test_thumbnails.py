"""The thumbnail cache on real files: JPEGs of a real video, bounded in bytes on disk, least
recently used out first; a time past the video's end is refused, not rendered or cached."""

from __future__ import annotations

import pytest

from tests.media import tiny_frames
from vifusion.query.thumbnails import PastEnd, ThumbnailCache


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    path = tmp_path_factory.mktemp("thumbs") / "v.mp4"
    tiny_frames(path, 40, 4)  # 10 s, 4 frames a second
    return path


def _on_disk(root) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def test_the_cache_stays_within_its_byte_bound_dropping_the_least_recently_used(tmp_path, video):
    root = tmp_path / "thumbs"
    size = len(ThumbnailCache(tmp_path / "probe", 1 << 20).get(1, video, 0.0))
    cache = ThumbnailCache(root, 5 * size + size // 2)  # room for five
    first = cache.get(1, video, 0.0)
    assert first[:3] == b"\xff\xd8\xff"
    for t in range(1, 10):
        cache.get(1, video, float(t))
        cache.get(1, video, 0.0)  # kept in use: never the least recent
        assert _on_disk(root) <= cache.max_bytes
    kept = sorted(p.name for p in root.rglob("*.jpg"))
    assert (
        len(kept) >= 4 and "0-320.jpg" in kept and "90-320.jpg" in kept and "10-320.jpg" not in kept
    )
    # a cache opened again over the same folder counts what is there and keeps the bound
    again = ThumbnailCache(root, 2 * size + size // 2)
    assert _on_disk(root) <= again.max_bytes
    assert again.get(1, video, 9.0)[:3] == b"\xff\xd8\xff"


def test_a_time_past_the_end_is_refused_and_cached_nowhere(tmp_path, video):
    cache = ThumbnailCache(tmp_path / "thumbs", 1 << 20)
    assert cache.get(1, video, 9.9)[:3] == b"\xff\xd8\xff"  # inside the last frame (9.75-10 s)
    for t in (10.5, 60.0, 1e7):
        with pytest.raises(PastEnd):
            cache.get(1, video, t)
    assert [p.name for p in (tmp_path / "thumbs").rglob("*.jpg")] == ["99-320.jpg"]


def test_dropping_a_video_frees_its_bytes(tmp_path, video):
    cache = ThumbnailCache(tmp_path / "thumbs", 1 << 20)
    for t in range(5):
        cache.get(1, video, float(t))
        cache.get(2, video, float(t))
    cache.drop(1)
    assert not (tmp_path / "thumbs" / "1").exists()
    assert cache.bytes == _on_disk(tmp_path / "thumbs") > 0
