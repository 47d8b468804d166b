"""Decoding and sampling on real H.264 files written by vifusion.samples (no mocks)."""

from __future__ import annotations

import shutil
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from tests.media import huge_frame, tiny_frames, zero_timescale
from vifusion import samples
from vifusion.extract._container import probe_file
from vifusion.extract.decode import (
    DecodeError,
    VideoInfo,
    decode,
    open_sampled,
    open_sampled_with_text,
    output_size,
    probe,
    sample_frames,
)

SCENES = ("coffee", "chelsea", "motion")


@pytest.fixture(scope="module")
def kitchen(tmp_path_factory: pytest.TempPathFactory) -> samples.SampleVideo:
    return samples.write_video(tmp_path_factory.mktemp("decode") / "kitchen.mp4", SCENES)


@pytest.fixture(scope="module")
def rendered() -> list[np.ndarray]:
    return list(samples.render(SCENES))


def _all(path: Path, **kw) -> tuple[np.ndarray, list[tuple[int, float, float]]]:
    frames, times = [], []
    for f, t in decode(path, **kw):
        frames.append(f)
        times += t
    return np.concatenate(frames), times


def _resize(img: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    return np.asarray(Image.fromarray(img).resize(size, Image.BILINEAR)).astype(np.float64)


# --- probe ---------------------------------------------------------------------------------


def test_probe(kitchen: samples.SampleVideo) -> None:
    info = probe(kitchen.path)
    assert info == VideoInfo(duration_s=12.0, fps=24.0, width=320, height=240, num_frames=288)
    assert probe_file(kitchen.path).container == "mov"


def test_probe_other_rate_and_size(tmp_path: Path) -> None:
    v = samples.write_video(tmp_path / "tall.mp4", ["rocket"], scene_s=2.5, fps=10, size=(120, 200))
    info = probe(v.path)
    assert (info.width, info.height, info.fps, info.num_frames) == (120, 200, 10.0, 25)
    assert info.duration_s == pytest.approx(2.5)


# --- sample_frames -------------------------------------------------------------------------


def _info(duration_s: float, fps: float = 24.0) -> VideoInfo:
    n = round(duration_s * fps)
    return VideoInfo(duration_s=n / fps, fps=fps, width=320, height=240, num_frames=n)


def test_sample_one_per_second_middle_frame() -> None:
    got = sample_frames(_info(12.0), 1.0, 3600)
    assert got == [(24 * k + 12, float(k), float(k + 1)) for k in range(12)]


def test_sample_partial_last_interval() -> None:
    got = sample_frames(_info(12.5), 1.0, 3600)
    assert len(got) == 13
    assert got[-1] == (int(12.25 * 24), 12.0, 12.5)
    got = sample_frames(_info(12.5), 0.5, 3600)
    assert [t[1:] for t in got] == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10), (10, 12), (12, 12.5)]


def test_sample_cap_spreads_over_whole_video() -> None:
    got = sample_frames(_info(120.0), 1.0, 10)
    assert len(got) == 10
    assert [(t0, t1) for _, t0, t1 in got] == [(12.0 * k, 12.0 * (k + 1)) for k in range(10)]
    assert [i for i, _, _ in got] == [24 * (12 * k + 6) for k in range(10)]
    assert sample_frames(_info(120.0), 1.0, 1) == [(24 * 60, 0.0, 120.0)]


def test_sample_short_videos_give_a_frame() -> None:
    assert sample_frames(_info(0.5), 1.0, 3600) == [(6, 0.0, 0.5)]
    one = VideoInfo(duration_s=1 / 24, fps=24.0, width=320, height=240, num_frames=1)
    assert sample_frames(one, 1.0, 3600) == [(0, 0.0, round(1 / 24, 6))]


def test_sample_faster_than_the_video_keeps_each_frame_once() -> None:
    got = sample_frames(_info(2.0, fps=10.0), 30.0, 3600)
    assert [i for i, _, _ in got] == list(range(20))


@pytest.mark.parametrize("duration", [0.04, 1.0, 3.3, 59.99, 600.0, 3601.7])
@pytest.mark.parametrize("fps", [7.5, 23.976, 29.97, 60.0])
@pytest.mark.parametrize(("rate", "cap"), [(1.0, 3600), (0.25, 3600), (2.0, 50), (1.0, 7)])
def test_sample_invariants(duration: float, fps: float, rate: float, cap: int) -> None:
    info = _info(duration, fps) if duration * fps >= 1 else VideoInfo(1 / fps, fps, 8, 8, 1)
    got = sample_frames(info, rate, cap)
    assert 1 <= len(got) <= cap
    idx = [i for i, _, _ in got]
    assert idx == sorted(set(idx)) and 0 <= idx[0] and idx[-1] < info.num_frames
    assert got[0][1] == 0.0 and got[-1][2] == pytest.approx(info.duration_s, abs=1e-6)
    for (i, t0, t1), nxt in zip(got, got[1:] + [None]):
        assert t0 < t1 <= info.duration_s + 1e-6
        assert t0 - 1 / fps <= i / fps <= t1  # the frame is inside its interval
        if nxt is not None:
            assert nxt[1] == pytest.approx(t1, abs=1e-6)  # intervals tile the video


def test_sample_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        sample_frames(_info(1.0), 0.0, 10)
    with pytest.raises(ValueError):
        sample_frames(_info(1.0), 1.0, 0)


# --- decode --------------------------------------------------------------------------------


def test_output_size() -> None:
    assert output_size(320, 240, 224) == (299, 224)
    assert output_size(1920, 1080, 224) == (398, 224)
    assert output_size(240, 320, 224) == (224, 299)
    assert output_size(100, 100, 224) == (224, 224)


def test_decode_count_shape_times(kitchen: samples.SampleVideo) -> None:
    batches = list(decode(kitchen.path, sample_fps=1.0, max_frames=3600, batch=5))
    assert [len(f) for f, _ in batches] == [5, 5, 2]
    for frames, times in batches:
        assert frames.shape[1:] == (224, 299, 3) and frames.dtype == np.uint8
        assert len(times) == len(frames)
    times = [t for _, ts in batches for t in ts]
    planned = sample_frames(probe(kitchen.path), 1.0, 3600)
    # Each interval is shown by a frame inside it, the one cheapest to decode: a keyframe
    # (the scenes' cuts at 0, 4 and 8 s) or the first the decoder reaches; its row runs from
    # its own time to the next sampled frame's.
    assert all(t0 <= i / 24 < t1 for (i, _, _), (_, t0, t1) in zip(times, planned))
    assert [i for i, _, _ in times] == [0, 26, 50, 74, 96, 122, 146, 170, 192, 218, 242, 267]
    assert [t0 for _, t0, _ in times] == [round(i / 24, 6) for i, _, _ in times]
    assert [t1 for _, _, t1 in times] == [t0 for _, t0, _ in times[1:]] + [12.0]


def test_gpu_decoding_gives_the_frames_the_cpu_gives(kitchen: samples.SampleVideo) -> None:
    # Asked for on a node with no GPU (CI), decoding stays on the CPU; on one with NVDEC, the
    # engine decodes the same pictures (H.264 decodes exactly: only rounding in the
    # conversion to RGB may differ).
    def sampled(gpu: bool) -> tuple[np.ndarray, list]:
        _, total, batches = open_sampled(kitchen.path, 2.0, 3600, batch=7, gpu=gpu)
        frames, spans = zip(*batches)
        assert sum(len(f) for f in frames) == total == 24
        return np.concatenate(frames).astype(np.int16), [s for b in spans for s in b]

    (cpu, cpu_spans), (gpu, gpu_spans) = sampled(False), sampled(True)
    assert gpu_spans == cpu_spans
    assert np.abs(gpu - cpu).max() <= 2


def test_decode_cap(kitchen: samples.SampleVideo) -> None:
    frames, times = _all(kitchen.path, sample_fps=1.0, max_frames=4)
    assert len(frames) == 4  # one in each of [0, 3), [3, 6), [6, 9), [9, 12)
    assert [k * 3 <= i / 24 < (k + 1) * 3 for k, (i, _, _) in enumerate(times)] == [True] * 4
    assert times[-1][2] == 12.0


def test_decode_portrait_short_side(tmp_path: Path) -> None:
    v = samples.write_video(tmp_path / "tall.mp4", ["rocket"], scene_s=2.0, size=(240, 320))
    frames, times = _all(v.path, sample_fps=1.0, max_frames=10, short_side=112)
    assert frames.shape == (2, 149, 112, 3)


def _colours(img: np.ndarray) -> np.ndarray:
    """Coarse colour histogram (4 levels per channel), normalised."""
    q = img.reshape(-1, 3).astype(np.int64) // 64
    h = np.bincount(q[:, 0] * 16 + q[:, 1] * 4 + q[:, 2], minlength=64).astype(np.float64)
    return h / h.sum()


def test_decode_frames_show_their_scene(kitchen: samples.SampleVideo) -> None:
    frames, times = _all(kitchen.path, sample_fps=1.0, max_frames=3600)
    photos = {name: samples.photo(name) for name in samples.PHOTOS}
    means = {name: p.reshape(-1, 3).mean(0) for name, p in photos.items()}
    hists = {name: _colours(p) for name, p in photos.items()}
    shown = []
    for frame, (_, t0, t1) in zip(frames, times):
        scene = kitchen.scene_at((t0 + t1) / 2).photo
        shown.append(scene)
        overlap = {name: np.minimum(_colours(frame), h).sum() for name, h in hists.items()}
        if scene == samples.MOTION:
            assert max(overlap.values()) < 0.5, (t0, overlap)
            continue
        # Of all ten photos, the frame's colours are its own photo's ...
        assert max(overlap, key=overlap.get) == scene, (t0, overlap)
        assert overlap[scene] > 0.7
        # ... and so is its mean colour, among the photos of this video.
        m = frame.reshape(-1, 3).mean(0)
        dist = {name: np.linalg.norm(m - means[name]) for name in ("coffee", "chelsea")}
        assert min(dist, key=dist.get) == scene, (t0, dist)
    assert shown == ["coffee"] * 4 + ["chelsea"] * 4 + ["motion"] * 4


def test_decode_returns_exactly_the_indexed_frame(
    kitchen: samples.SampleVideo, rendered: list[np.ndarray]
) -> None:
    # The motion scene moves several pixels a frame: an off-by-one seek would show.
    frames, times = _all(kitchen.path, sample_fps=4.0, max_frames=3600)
    checked = 0
    for frame, (i, t0, _t1) in zip(frames, times):
        if not 8.0 <= t0 < 12.0 or i + 1 >= 288:
            continue
        err = {
            j: np.abs(frame - _resize(rendered[j], (299, 224))).mean() for j in (i - 1, i, i + 1)
        }
        assert min(err, key=err.get) == i, (i, err)
        assert err[i] < 4
        checked += 1
    assert checked == 16


def _every_frame(path: Path) -> list[np.ndarray]:
    """Every frame ``path`` shows, decoded in turn (a packet the decoder refuses passed over),
    at the size ``decode`` gives 320x240 video."""
    frames = []
    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        for packet in [*(p for p in c.demux(stream) if p.size), None]:
            try:
                frames += stream.codec_context.decode(packet)
            except av.error.InvalidDataError:
                continue
        return [f.to_ndarray(width=299, height=224, format="rgb24") for f in frames]


def _remux(src: Path, dst: Path, container: str) -> Path:
    """``src``'s video packets, unchanged, in another container."""
    with av.open(str(src)) as i, av.open(str(dst), "w", format=container) as o:
        out = o.add_stream_from_template(i.streams.video[0])
        for packet in i.demux(i.streams.video[0]):
            if packet.dts is not None:
                packet.stream = out
                o.mux(packet)
    return dst


@pytest.fixture(scope="module")
def containers(kitchen: samples.SampleVideo, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The kitchen video as mp4 and Matroska (keyframes from the index: gaps are skipped),
    MPEG-TS (keyframes guessed: every packet up to the last sample decoded) and raw H.264
    (no timestamps: every frame decoded and counted), each with every frame decoded in turn."""
    folder = tmp_path_factory.mktemp("containers")
    paths = {
        "mp4": kitchen.path,
        "matroska": _remux(kitchen.path, folder / "kitchen.mkv", "matroska"),
        "mpegts": _remux(kitchen.path, folder / "kitchen.ts", "mpegts"),
        "h264": _remux(kitchen.path, folder / "kitchen.h264", "h264"),
    }
    return {name: (path, _every_frame(path)) for name, path in paths.items()}


@pytest.mark.parametrize(
    ("container", "rate", "cap"),
    [
        ("mp4", 1.5, 3600),
        ("mp4", 0.3, 3600),
        ("mp4", 24.0, 3600),
        ("mp4", 1.0, 5),
        ("matroska", 0.3, 3600),
        ("mpegts", 1.5, 3600),
        ("h264", 1.5, 3600),
    ],
)
def test_decoding_only_what_samples_need_gives_the_frames_a_full_decode_shows(
    containers: dict, container: str, rate: float, cap: int
) -> None:
    """Packets no sample needs are never decoded, nor frames no other refers to (x264's
    B-frames), yet every frame handed out is the very frame a full decode shows at its index."""
    path, every = containers[container]
    frames, times = _all(path, sample_fps=rate, max_frames=cap, short_side=224)
    assert len(frames) == len(sample_frames(probe(path), rate, cap))
    for frame, (i, _, _) in zip(frames, times):
        assert np.array_equal(frame, every[i]), i


def test_a_gif_is_decoded(tmp_path: Path) -> None:
    from skimage.data import __file__ as data_init

    gif = tmp_path / "anim.gif"
    shutil.copy(Path(data_init).parent / "no_time_for_that_tiny.gif", gif)
    p = probe_file(gif)
    assert p.info.num_frames == 24 and p.info.fps == pytest.approx(100 / 7)
    frames, times = _all(gif, sample_fps=5.0, max_frames=3600)
    assert len(frames) == len(times) == len(sample_frames(p.info, 5.0, 3600)) == 9
    assert frames.shape[1:] == (400, 224, 3)


# --- bad input -----------------------------------------------------------------------------


def _audio_only(path: Path) -> None:
    with av.open(str(path), "w") as c:
        s = c.add_stream("aac", rate=44100)
        for i in range(20):
            f = av.AudioFrame.from_ndarray(
                np.zeros((1, 1024), np.float32), format="fltp", layout="mono"
            )
            f.sample_rate, f.pts = 44100, i * 1024
            c.mux(s.encode(f))
        c.mux(s.encode(None))


BAD = {
    "zero-fps.mp4": ("frame rate", lambda p, src: zero_timescale(src, p)),
    "text.mp4": ("not a video", lambda p, src: p.write_text("hello, this is not a video\n")),
    "huge.mp4": ("frame size 9216x9216 is over the limit", lambda p, src: huge_frame(p)),
    "empty.mp4": ("empty file", lambda p, src: p.write_bytes(b"")),
    "half.mp4": (
        "truncated",
        lambda p, src: p.write_bytes(src.read_bytes()[: src.stat().st_size // 2]),
    ),
    "header.mp4": ("truncated", lambda p, src: p.write_bytes(src.read_bytes()[:2000])),
    "missing.mp4": ("no such file", lambda p, src: None),
    "folder.mp4": ("not a regular file", lambda p, src: p.mkdir()),
    "sound.mp4": ("no video stream", lambda p, src: _audio_only(p)),
    "still.mp4": (
        "still image",
        lambda p, src: Image.fromarray(samples.photo("chelsea")).save(p, "PNG"),
    ),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_raises_decode_error(
    name: str, kitchen: samples.SampleVideo, tmp_path: Path
) -> None:
    reason, make = BAD[name]
    path = tmp_path / name
    make(path, kitchen.path)
    for call in (lambda: probe(path), lambda: list(decode(path, 1.0, 3600))):
        with pytest.raises(DecodeError) as err:
            call()
        assert name in str(err.value) and reason in str(err.value), str(err.value)


def _wreck(src: Path, dst: Path, frames: list[int]) -> None:
    """``src`` with the packets of these frames (display order) overwritten with noise after
    their first 4 bytes: the decoder refuses each (its NAL size is wrong)."""
    data = bytearray(src.read_bytes())
    with av.open(str(src)) as c:
        packets = sorted(((p.pts, p.pos, p.size) for p in c.demux(video=0) if p.size))
    noise = np.random.default_rng(0)
    for i in frames:
        _, pos, size = packets[i]
        data[pos + 4 : pos + size] = noise.integers(0, 256, size - 4, np.uint8).tobytes()
    dst.write_bytes(bytes(data))


def test_a_corrupt_packet_under_a_sample_is_shown_by_the_frame_before_it(
    kitchen: samples.SampleVideo, tmp_path: Path
) -> None:
    """One sampled frame of 12 that cannot be decoded is a glitch, not a failed video (decord
    gave up on it); three are a broken file, refused naming the first."""
    _wreck(kitchen.path, tmp_path / "glitch.mp4", [50])
    frames, times = _all(tmp_path / "glitch.mp4", sample_fps=1.0, max_frames=3600)
    assert len(frames) == 12 and times[3][1] == round(74 / 24, 6)  # the rows as if unharmed
    shown, t0, _ = times[2]  # 50 stands for [2, 3)
    assert 48 <= shown < 50 and t0 == round(50 / 24, 6)  # shown by the frame decoded before it
    # ... a B-frame leaning on the lost one, concealed: still a picture of its scene
    assert np.minimum(_colours(frames[2]), _colours(samples.photo("coffee"))).sum() > 0.7
    _wreck(kitchen.path, tmp_path / "broken.mp4", [50, 146, 242])
    with pytest.raises(DecodeError, match="broken.mp4: truncated or corrupt: frame 50"):
        _all(tmp_path / "broken.mp4", sample_fps=1.0, max_frames=3600)


def test_an_extreme_frame_count_is_sampled_within_the_cap(tmp_path: Path) -> None:
    """50,000 frames at 1000 fps: probed by packet count, sampled within max_frames, never
    decoded into memory all at once."""
    path = tmp_path / "many.mp4"
    tiny_frames(path, 50_000, 1000)
    info = probe(path)
    assert info.num_frames == 50_000 and info.duration_s == pytest.approx(50.0)
    frames, spans = _all(path, sample_fps=1.0, max_frames=3600)
    assert len(frames) == len(spans) == 50 and spans[-1][2] == pytest.approx(50.0)
    frames, spans = _all(path, sample_fps=1.0, max_frames=10)
    assert len(frames) == 10 and spans[0][1] < 5 and spans[-1][2] == pytest.approx(50.0)


def test_the_container_is_read_from_the_bytes_not_the_name(tmp_path: Path) -> None:
    path = tmp_path / "really-matroska.mp4"
    tiny_frames(path, 40, 10, container="matroska")
    assert probe(path).num_frames == 40
    assert len(_all(path, sample_fps=1.0, max_frames=3600)[0]) == 4


def test_open_sampled_probes_once_and_decodes_lazily(kitchen: samples.SampleVideo) -> None:
    info, total, batches = open_sampled(kitchen.path, 1.0, 3600, batch=5)
    assert info == probe(kitchen.path)
    assert total == len(sample_frames(info, 1.0, 3600)) == 12
    assert sum(len(spans) for _, spans in batches) == total


def test_frames_for_reading_text_keep_a_small_videos_own_size_and_share_its_file(
    kitchen: samples.SampleVideo, tmp_path: Path
) -> None:
    """Where screen text is read the extractor decodes at a readable size, never above the
    video's own (320x240 here) nor below the embedder's, from a file it opened itself and
    keeps for the audio; a frame at that size is made only when asked for (Deferred)."""
    from vifusion.extract.decode import open_video

    with open_video(kitchen.path) as file:
        _, total, batches = open_sampled_with_text(kitchen.path, 1.0, 3600, 224, 720, file=file)
        shapes = {(smalls.shape[1:], big().shape) for smalls, _, bigs in batches for big in bigs}
        assert shapes == {((224, 299, 3), (240, 320, 3))} and not file.closed
    _, _, batches = open_sampled(kitchen.path, 1.0, 3600, short_side=480, batch=total)
    assert next(batches)[0].shape == (total, 480, 640, 3)  # upscaled, as the embedder's frames are
    tiny_frames(tmp_path / "tiny.mkv", 30, 10)  # 16x16: upscaled to the embedder's 224
    _, _, batches = open_sampled_with_text(tmp_path / "tiny.mkv", 1.0, 3600, 224, 720)
    small, _, big = next(batches)
    assert small.shape == (3, 224, 224, 3) and big is small  # one size: one array


# --- the decode schedule: which frame stands for a sample, and what decoding it costs --------


def _encode(path: Path, seconds: float, gop: int, fps: int = 24, container: str = "mp4") -> Path:
    """H.264 of the moving-shapes scene (every frame differs), 160x120, a keyframe every
    ``gop`` frames exactly (no scene-cut keyframes), x264's B-frames on."""
    from fractions import Fraction

    with av.open(str(path), "w", format=container) as c:
        s = c.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = 160, 120, "yuv420p"
        s.options = {
            "preset": "veryfast",
            "x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0",
        }
        for i, rgb in enumerate(samples.render([samples.MOTION], seconds, fps, (160, 120))):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            c.mux(s.encode(frame))
        c.mux(s.encode(None))
    return path


def _decode_counted(path: Path, rate: float, cap: int = 3600):
    from vifusion.extract.decode import DecodeStats

    stats = DecodeStats()
    _, _, batches = open_sampled(path, rate, cap, short_side=120, stats=stats)
    frames, spans = [], []
    for f, s in batches:
        frames += list(f)
        spans += s
    return frames, spans, stats


def _full(path: Path) -> list[np.ndarray]:
    """Every frame a full decode shows, at 160x120."""
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def _keyframes(path: Path) -> set[int]:
    with av.open(str(path)) as c:
        shown = sorted((p.pts, p.is_keyframe) for p in c.demux(video=0) if p.size)
    return {i for i, (_, key) in enumerate(shown) if key}


def _within_half_an_interval(path: Path, rate: float, spans: list[tuple[int, float, float]]):
    """Each sample's frame lies inside its interval, so within half of it of its middle."""
    planned = sample_frames(probe(path), rate, 3600)
    assert len(spans) == len(planned)
    for (i, start, _), (_, t0, t1) in zip(spans, planned):
        assert abs(start - (t0 + t1) / 2) <= (t1 - t0) / 2 and t0 <= i / 24 < t1, (i, t0, t1)


@pytest.fixture(scope="module")
def gops(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("gops")
    return {
        "half-second": _encode(folder / "gop12.mp4", 8.0, 12),
        "two-second": _encode(folder / "gop48.mp4", 12.0, 48),
    }


def test_where_keyframes_come_as_often_as_samples_only_keyframes_are_decoded(gops) -> None:
    """A keyframe every 0.5 s, a sample a second: each sample is shown by the keyframe
    nearest its middle, decoded alone (one decoded frame per sampled frame), the very frame a
    full decode shows, and its row starts at that keyframe's own time."""
    path = gops["half-second"]
    frames, spans, stats = _decode_counted(path, 1.0)
    every, keys = _full(path), _keyframes(path)
    assert [i for i, _, _ in spans] == [12 + 24 * k for k in range(8)]  # 0.5 s, 1.5 s, ...
    assert {i for i, _, _ in spans} <= keys and stats.decoded == len(spans) == 8
    for frame, (i, start, _) in zip(frames, spans):
        assert np.array_equal(frame, every[i]) and start == pytest.approx(i / 24)
    _within_half_an_interval(path, 1.0, spans)


def test_where_keyframes_are_sparser_than_samples_decoding_seeks_past_the_gaps(gops) -> None:
    """A keyframe every 2 s, a sample every 5 s: each sample is a keyframe inside its interval
    (2, 8 s: the nearest the middle), and the packets between them are sought over, not read."""
    path = gops["two-second"]
    frames, spans, stats = _decode_counted(path, 0.2)
    every = _full(path)
    assert [i for i, _, _ in spans] == [48, 192, 240]  # 2 s, 8 s, 10 s (of [10, 12))
    assert stats.decoded == 3 and stats.seeks == 3 and stats.packets < len(every) / 10
    assert all(np.array_equal(f, every[i]) for f, (i, _, _) in zip(frames, spans))
    _within_half_an_interval(path, 0.2, spans)


def test_between_keyframes_a_sample_is_the_frame_decoding_reaches_first(gops) -> None:
    """A keyframe every 2 s, a sample a second: the odd seconds hold no keyframe, and are
    shown by their first frame in decode order (decoding goes on from the keyframe before
    to it, no further), within half a second of the middle; rows start at each frame's own
    time and tile the video."""
    path = gops["two-second"]
    frames, spans, stats = _decode_counted(path, 1.0)
    every = _full(path)
    shown = [i for i, _, _ in spans]
    assert shown[::2] == [48 * k for k in range(6)]  # the keyframes
    assert all(24 * (2 * k + 1) <= i < 24 * (2 * k + 1) + 4 for k, i in enumerate(shown[1::2]))
    assert stats.decoded < len(every) / 2  # the second half of each GOP is never decoded
    assert all(np.array_equal(f, every[i]) for f, (i, _, _) in zip(frames, spans))
    assert [s for _, s, _ in spans] == [round(i / 24, 6) for i in shown]
    assert [e for _, _, e in spans] == [s for _, s, _ in spans[1:]] + [12.0]
    _within_half_an_interval(path, 1.0, spans)


def test_true_timestamps_count_from_the_streams_first_frame(gops, tmp_path: Path) -> None:
    """MPEG-TS starts its clock at 1.4 s: rows still start at the frame's own time in the
    video (0 at its first frame), as in the mp4 the packets came from."""
    path = _remux(gops["two-second"], tmp_path / "gop48.ts", "mpegts")
    _, spans, _ = _decode_counted(path, 1.0)
    assert spans[0][1] == 0.0
    assert [s for _, s, _ in spans] == [round(i / 24, 6) for i, _, _ in spans]
    _within_half_an_interval(path, 1.0, spans)


def _cut_box(src: Path, dst: Path, box: bytes) -> Path:
    """``src`` with its one ``box`` atom renamed ``free`` (an mp4 reader skips it)."""
    data = src.read_bytes()
    assert data.count(box) == 1
    dst.write_bytes(data.replace(box, b"free"))
    return dst


def _cut_cues(src: Path, dst: Path) -> Path:
    """A Matroska file cut where its Cues element (its keyframe index) starts."""
    data = src.read_bytes()
    at = data.rfind(bytes.fromhex("1C53BB6B"))
    assert at > 0
    dst.write_bytes(data[:at])
    return dst


@pytest.mark.parametrize("cut", ["mp4 without stss", "mkv without cues"])
def test_a_file_whose_keyframe_index_is_missing_still_decodes_the_frames_shown(
    gops, tmp_path: Path, cut: str
) -> None:
    """An mp4 without its sync-sample table (FFmpeg's parser finds the keyframes) and a
    Matroska file cut before its cues (seeking reads on to the time sought): every sampled
    frame is the frame a full decode shows."""
    src = gops["two-second"]
    if cut == "mp4 without stss":
        path = _cut_box(src, tmp_path / "nostss.mp4", b"stss")
    else:
        path = _cut_cues(_remux(src, tmp_path / "cues.mkv", "matroska"), tmp_path / "nocues.mkv")
    every = _full(src)
    for rate in (1.0, 0.2):
        frames, spans, _ = _decode_counted(path, rate)
        assert len(frames) == len(sample_frames(probe(path), rate, 3600))
        assert all(np.array_equal(f, every[i]) for f, (i, _, _) in zip(frames, spans)), rate
