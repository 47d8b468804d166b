"""People and faces (extract/people.py): faces found in real photos become words that a text
search finds. The photos are scikit-image's: the astronaut and the cameraman (a person, a
face) against photos with no one in them, among them the retina, which beats
the astronaut for "a person" by their ImageNet classes alone."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from vifusion.extract.people import CLOSE_UP, CROWD, PeopleDetector, people_terms
from vifusion.samples import photo, write_video

NOBODY = ("coffee", "chelsea", "retina", "rocket")


def _box(x1: float, y1: float, side: float, p: float = 0.99) -> list[float]:
    return [x1, y1, x1 + side, y1 + side, p]


def test_words_follow_the_faces_count_and_size():
    area = 224 * 320
    assert people_terms(np.zeros((0, 5)), area) == ([], [])
    one, _ = people_terms(np.array([_box(10, 10, 30)]), area)
    assert one == ["person", "face"]
    two, _ = people_terms(np.array([_box(10, 10, 30), _box(100, 10, 30)]), area)
    assert "people" in two and "crowd" not in two
    many, _ = people_terms(np.array([_box(40 * i, 10, 30) for i in range(CROWD)]), area)
    assert "crowd" in many
    side = (CLOSE_UP * area) ** 0.5 + 1
    close, weights = people_terms(np.array([_box(0, 0, side, 0.9)]), area)
    assert "close-up of a face" in close and all(0 < w < 1 for w in weights)


@pytest.fixture(scope="module")
def detector() -> PeopleDetector:
    return PeopleDetector()


def _embedder_size(name: str) -> np.ndarray:
    """The photo as the extractor gives it to the models: short side 224."""
    import cv2

    rgb = photo(name)
    h, w = rgb.shape[:2]
    return cv2.resize(rgb, (round(w * 224 / h), 224), interpolation=cv2.INTER_AREA)


@pytest.mark.parametrize("name", ["astronaut", "camera"])
def test_a_face_is_found_where_there_is_one(detector, name):
    ((words, _),) = detector.terms(_embedder_size(name)[None])
    assert words[:2] == ["person", "face"]


@pytest.mark.parametrize("name", NOBODY)
def test_no_face_where_there_is_none(detector, name):
    assert detector.terms(_embedder_size(name)[None]) == [([], [])]


@pytest.mark.slow  # a `vifusion index` run: Ray, the extractor's models (~40 s)
def test_a_text_search_finds_the_person_first(ray_session, tmp_path, capsys):
    from vifusion.cli import parser as cli

    videos = tmp_path / "videos"
    videos.mkdir()
    for name in ("astronaut", *NOBODY):
        write_video(videos / f"{name}.mp4", [name], scene_s=3.0)
    data = tmp_path / "data"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["index", "--quiet", "--data-dir", str(data), str(videos)]) == 0
    for query in ("a person", "a face", "a close-up of a face"):
        capsys.readouterr()
        assert cli.main(["search", "--data-dir", str(data), "--json", query]) == 0
        found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert Path(found[0]["source"]).name == "astronaut.mp4", (query, found[:3])


def test_a_video_without_faces_is_looked_at_sparsely_and_a_face_still_found(detector):
    """Footage with no one in it costs a look every few frames, not every frame; the frames
    the back-off skipped before the face showed are looked at once it is found."""
    nobody, astronaut = _embedder_size("chelsea"), _embedder_size("astronaut")
    width = min(nobody.shape[1], astronaut.shape[1])
    frames = np.stack([nobody[:, :width]] * 10 + [astronaut[:, :width]] * 6)
    tracker = detector.track(backoff_max=4)
    terms = tracker.terms(frames)
    assert [words[:1] for words, _ in terms] == [[]] * 10 + [["person"]] * 6
    assert tracker.looked < len(frames)
    every = detector.track(backoff_max=1)
    assert every.terms(frames) == terms and every.looked == len(frames)
