"""The sample videos are real H.264 files whose frames are the ones render() describes."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from vifusion import samples


def _read_all(path: Path) -> tuple[list[np.ndarray], av.video.stream.VideoStream, list[float]]:
    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        frames, times = [], []
        for f in c.decode(stream):
            frames.append(f.to_ndarray(format="rgb24"))
            times.append(f.time)
        return frames, stream, times


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> list[samples.SampleVideo]:
    return samples.write_demo_set(tmp_path_factory.mktemp("demo"))


def test_photos_load_offline() -> None:
    for name in samples.PHOTOS:
        img = samples.photo(name)
        assert img.ndim == 3 and img.shape[2] == 3 and img.dtype == np.uint8, name
        assert img.shape[0] >= 240 and img.shape[1] >= 320, name
        assert img.std() > 10, name  # a picture, not a blank
    cat = samples.photo("chelsea")
    cat[:] = 0  # a copy: the cached photo is untouched
    assert samples.photo("chelsea").any()
    with pytest.raises(KeyError, match="unknown photo"):
        samples.photo("dog")


def test_demo_set_layout(demo: list[samples.SampleVideo]) -> None:
    assert [v.name for v in demo] == list(samples.DEMO_SET)
    seen = [s.photo for v in demo for s in v.scenes if s.photo != samples.MOTION]
    assert sorted(seen) == sorted(set(seen)), "every photo in exactly one video"
    for v in demo:
        assert v.path.is_file() and v.path.name == v.name
        assert len(v.scenes) >= 3
        assert v.scenes[0].start_s == 0.0 and v.duration_s == pytest.approx(12.0)
        for a, b in zip(v.scenes, v.scenes[1:]):
            assert a.end_s == b.start_s
    kitchen = demo[0]
    assert kitchen.scene_of("chelsea") == samples.Scene("chelsea", 4.0, 8.0)
    assert kitchen.scene_at(5.5).photo == "chelsea"
    with pytest.raises(KeyError):
        kitchen.scene_of("rocket")


def test_demo_video_decodes_to_its_scenes(demo: list[samples.SampleVideo]) -> None:
    kitchen = demo[0]
    frames, stream, times = _read_all(kitchen.path)
    assert stream.codec_context.name == "h264"
    assert stream.codec_context.pix_fmt == "yuv420p"
    assert (stream.codec_context.width, stream.codec_context.height) == (320, 240)
    assert stream.average_rate == 24
    assert len(frames) == 288
    assert times[-1] == pytest.approx(287 / 24)
    expected = list(samples.render([s.photo for s in kitchen.scenes]))
    for i in range(0, 288, 23):
        # Same frame as rendered, up to H.264 loss; far from a frame of another scene.
        err = np.abs(frames[i].astype(float) - expected[i]).mean()
        other = np.abs(frames[i].astype(float) - expected[(i + 96) % 288]).mean()
        assert err < 6 and other > 30, (i, err, other)


def test_write_video_is_deterministic(tmp_path: Path) -> None:
    a = samples.write_video(tmp_path / "a.mp4", ["rocket", "motion"], scene_s=1.0)
    b = samples.write_video(tmp_path / "b.mp4", ["rocket", "motion"], scene_s=1.0)
    assert a.path.read_bytes() == b.path.read_bytes()
    assert a.scenes == (samples.Scene("rocket", 0.0, 1.0), samples.Scene("motion", 1.0, 2.0))


def test_write_video_pans_and_zooms(tmp_path: Path) -> None:
    frames = list(samples.render(["astronaut"], scene_s=2.0, fps=12, size=(160, 120)))
    assert len(frames) == 24 and frames[0].shape == (120, 160, 3)
    steps = [np.abs(frames[i + 1].astype(float) - frames[i]).mean() for i in range(23)]
    assert min(steps) > 0, "the window moves every frame"
    assert max(steps) < 15, "slowly"
    with pytest.raises(KeyError):
        samples.write_video(tmp_path / "x.mp4", ["nope"])


def test_write_clip_size_and_duration(demo: list[samples.SampleVideo], tmp_path: Path) -> None:
    kitchen = demo[0]
    out = samples.write_clip(kitchen.path, tmp_path / "clip.mp4", 3.0, 7.5, (160, 120))
    assert out == tmp_path / "clip.mp4"
    frames, stream, times = _read_all(out)
    assert (stream.codec_context.width, stream.codec_context.height) == (160, 120)
    assert stream.average_rate == 24
    assert len(frames) == 108  # 4.5 s at 24 fps
    assert times[0] == 0.0 and times[-1] == pytest.approx(107 / 24)
    # The clip's first frame is the source frame at 3.0 s, scaled down.
    src, _, _ = _read_all(kitchen.path)
    small = src[72].reshape(120, 2, 160, 2, 3).mean(axis=(1, 3))
    assert np.abs(frames[0].astype(float) - small).mean() < 8
    with pytest.raises(ValueError, match="no frame"):
        samples.write_clip(kitchen.path, tmp_path / "none.mp4", 20.0, 25.0, (160, 120))


def test_a_talk_places_recorded_sound_at_its_time(tmp_path: Path) -> None:
    """A recording handed to a talk is heard where it was placed, and listed as said there."""
    from vifusion.extract.audio import SAMPLE_RATE, read_audio
    from vifusion.samples import talks

    rate = talks.AUDIO_RATE
    tone = (0.5 * np.sin(2 * np.pi * 440 * np.arange(rate // 2) / rate)).astype(np.float32)
    talk = talks.write_talk(tmp_path / "t.mkv", 4.0, recorded=[(2.0, tone, "a tone")], fps=5)
    assert [(s.start_s, s.end_s, s.text) for s in talk.said] == [(2.0, 2.5, "a tone")]
    heard = np.abs(read_audio(talk.path, 10.0)[1])
    loud = np.flatnonzero(heard > 0.1) / SAMPLE_RATE
    assert 1.95 < loud.min() and loud.max() < 2.55
