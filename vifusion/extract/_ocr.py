"""One picture into lines of text with RapidOCR (PP-OCRv4 detection and recognition, ONNX).

RapidOCR's own entry point is used in its parts (detect, crop, orient, recognise; the same
calls, in the same order) for two things it does not hand out:

- per-character confidences, which tell text in a script the model does not know (read as
  look-alike letters, a few of them unsure) from text it reads;
- the spaces between words. The recogniser (trained mostly on Chinese) often runs English
  words together ("Meetmeattheoldharbour"), which would hide every word from a keyword search.
  The word gaps are plain to see in the pixels, so a space is put back where a gap clearly
  wider than the gaps between letters falls between two recognised characters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

_MIN_CONTRAST = 40  # grey levels between ink and background below which gaps are not looked for
_WORD_GAP_HEIGHTS = 0.3  # a word gap is at least this share of the line's crop height ...
_WORD_GAP_LETTERS = 2.2  # ... and this many times the median gap on the line (letter gaps)
_JOIN_GAP_HEIGHTS = 1.5  # boxes on one row this close (in line heights) are one line
# A box the detector finds at the gate's size is text where it is this many times as long as
# high: a word of three letters or more is; the blobs it takes for text in photos and moving
# shapes are squarer (at most 1.3 in the demo videos).
_GATE_MIN_ASPECT = 1.5
# The gate's thresholds on the detector's text map (pixel, box score): lower than a reading's
# (0.3, 0.5), which at 224 px found 16-px captions on 360-line photo frames on 21 of 24 frames
# where these find them on 22, 14-px ones on 18 where these do on 20, and no more boxes on
# 48 frames of photos without text (2026-11-28, docs/benchmarks.md "Screen text that pays").
_GATE_THRESH, _GATE_BOX_THRESH = 0.2, 0.4
# A reading detects text with the picture's short side scaled up to at least this (RapidOCR's
# 736 doubled a 360-line frame, and detection was two thirds of a reading's CPU); larger
# pictures are read at their own size. Captions of 10-20 px read the same at 480 as at 736.
READ_SIDE = 480


@dataclass(frozen=True)
class Line:
    """A line of text as read: ``confidence`` is the mean of the characters' (spaces left out)."""

    text: str
    confidence: float
    char_confidences: tuple[float, ...]  # one per character of ``text`` that is not a space


def _is_cjk(ch: str) -> bool:
    return "\u3000" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff"


def word_gaps(crop: np.ndarray) -> list[tuple[int, int]]:
    """Column ranges [a, b) of the word gaps in a crop of one line of text (BGR or RGB)."""
    grey = crop.astype(np.float32).mean(axis=2)
    lo, hi = np.percentile(grey, (5, 95))
    if hi - lo < _MIN_CONTRAST:
        return []
    mid = (lo + hi) / 2
    # The background is the side the crop's border rows mostly fall on.
    border = np.concatenate([grey[0], grey[-1]])
    ink = grey < mid if np.median(border) >= mid else grey > mid
    h = crop.shape[0]
    inked = ink.sum(axis=0) > max(1, 0.05 * h)
    cols = np.flatnonzero(inked)
    if len(cols) < 2:
        return []
    gaps: list[tuple[int, int]] = []
    start = None
    for c in range(cols[0], cols[-1] + 1):
        if not inked[c] and start is None:
            start = c
        elif inked[c] and start is not None:
            gaps.append((start, c))
            start = None
    if not gaps:
        return []
    widths = np.array([b - a for a, b in gaps])
    least = max(_WORD_GAP_HEIGHTS * h, _WORD_GAP_LETTERS * float(np.median(widths)))
    return [g for g, w in zip(gaps, widths) if w >= least]


def respace(text: str, char_x: list[float], gaps: list[tuple[int, int]]) -> str:
    """``text`` with a space between two characters (at columns ``char_x``) that a word gap
    separates, where the model put none; never between two CJK characters."""
    out = []
    centres = [(a + b) / 2 for a, b in gaps]
    for i, ch in enumerate(text):
        if i and ch != " " and text[i - 1] != " " and not (_is_cjk(ch) and _is_cjk(text[i - 1])):
            if any(char_x[i - 1] < m < char_x[i] for m in centres):
                out.append(" ")
        out.append(ch)
    return "".join(out)


@dataclass(frozen=True)
class _Piece:
    """A detected box's reading: its bounds (in the detector's picture) and text."""

    x0: float
    x1: float
    y0: float
    y1: float
    text: str
    confs: tuple[float, ...]


def _same_row(row: _Piece, p: _Piece) -> bool:
    h = min(row.y1 - row.y0, p.y1 - p.y0)
    overlap = min(row.y1, p.y1) - max(row.y0, p.y0)
    return overlap >= 0.6 * h and p.x0 - row.x1 <= _JOIN_GAP_HEIGHTS * h


def _join(row: _Piece, p: _Piece) -> _Piece:
    text, confs = row.text + " " + p.text, row.confs + p.confs
    if p.x0 < row.x1:  # overlapping boxes: the seam's characters were read twice
        for k in range(min(3, len(row.text), len(p.text)), 0, -1):
            if row.text.endswith(p.text[:k]):
                dup = sum(ch != " " for ch in p.text[:k])
                text, confs = row.text[:-k] + p.text, row.confs[: len(row.confs) - dup] + p.confs
                break
    bounds = (row.x0, max(row.x1, p.x1), min(row.y0, p.y0), max(row.y1, p.y1))
    return _Piece(*bounds, " ".join(text.split()), confs)


def _join_rows(pieces: list[_Piece]) -> list[_Piece]:
    """The detector often cuts one line into boxes (at wide word gaps): boxes side by side on
    one row, closer than a gap between columns, are one line again. Top to bottom."""
    rows: list[_Piece] = []
    for p in sorted(pieces, key=lambda p: p.x0):
        for i, row in enumerate(rows):
            if _same_row(row, p):
                rows[i] = _join(row, p)
                break
        else:
            rows.append(p)
    return sorted(rows, key=lambda r: (r.y0, r.x0))


def _without_spinning(session: Any, threads: int) -> Any:
    """``session`` loaded again with its threads sleeping between runs. onnxruntime's threads
    spin-wait by default: with two of them, a look at a frame cost twice the CPU of one thread
    for no less time (2026-11-28, this machine), CPU the embedder and decoder needed."""
    import onnxruntime

    opts = onnxruntime.SessionOptions()
    opts.log_severity_level = 4
    opts.enable_cpu_mem_arena = False
    opts.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    providers, options = session.get_providers(), session.get_provider_options()
    return onnxruntime.InferenceSession(
        session._model_path,
        sess_options=opts,
        providers=providers,
        provider_options=[options.get(p, {}) for p in providers],
    )


class LineReader:
    """RapidOCR with ``threads`` CPU threads, or onnxruntime's CUDA provider where ``cuda``."""

    def __init__(self, threads: int, cuda: bool = False) -> None:
        from rapidocr_onnxruntime import RapidOCR

        self.engine = RapidOCR(
            det_limit_side_len=READ_SIDE,
            intra_op_num_threads=threads,
            inter_op_num_threads=1,
            det_use_cuda=cuda,
            cls_use_cuda=cuda,
            rec_use_cuda=cuda,
        )
        e = self.engine
        for part in (e.text_det.infer, e.text_cls.infer, e.text_rec.session):
            part.session = _without_spinning(part.session, threads)
        from rapidocr_onnxruntime.ch_ppocr_det.utils import DBPostProcess

        self._gate_boxes = DBPostProcess(
            thresh=_GATE_THRESH,
            box_thresh=_GATE_BOX_THRESH,
            max_candidates=1000,
            unclip_ratio=1.6,
            use_dilation=True,
            score_mode="fast",
        )

    @property
    def read_side(self) -> int:
        """The short side ``read`` detects text at (RapidOCR's ``limit_side_len``)."""
        return int(self.engine.text_det.limit_side_len)

    def sees_text(self, rgb: np.ndarray, side: int) -> bool:
        """Whether the text detector, run on the picture scaled to short side ``side``, finds a
        box shaped like a line of text: a look at a fraction of the cost of ``read`` (which
        detects at READ_SIDE or more), that misses text too small at that size, and a lone word of
        one or two letters."""
        import cv2
        from rapidocr_onnxruntime.ch_ppocr_det.utils import DetPreProcess

        det = self.engine.text_det
        h, w = rgb.shape[:2]
        scale = side / min(h, w)
        if scale < 1:
            rgb = cv2.resize(
                rgb,
                (max(1, round(w * scale)), max(1, round(h * scale))),
                interpolation=cv2.INTER_AREA,
            )
        x = DetPreProcess(side, "min", det.mean, det.std)(np.ascontiguousarray(rgb[:, :, ::-1]))
        if x is None:  # no size to look at: let ``read`` decide
            return True
        prob = det.infer(x)[0]
        boxes, _ = self._gate_boxes(prob, prob.shape[2:])  # in the map's pixels: undistorted
        for box in boxes:
            _, (w, h), _ = cv2.minAreaRect(np.asarray(box, np.float32))
            if max(w, h) >= _GATE_MIN_ASPECT * max(min(w, h), 1.0):
                return True
        return False

    def read(self, rgb: np.ndarray) -> list[Line]:
        """The lines of text in an (h, w, 3) uint8 RGB picture, top to bottom; [] where none."""
        e = self.engine
        img = np.ascontiguousarray(rgb[:, :, ::-1])  # the models were trained on BGR (cv2)
        img, _, _ = e.preprocess(img)
        img, _ = e.maybe_add_letterbox(img, {})
        boxes, _ = e.auto_text_det(img)
        if boxes is None:  # RapidOCR's answer for a picture without text
            return []
        crops = e.get_crop_img_list(img, boxes)
        crops, _, _ = e.text_cls(crops)
        results, _ = e.text_rec(crops, True)
        pieces = []
        for box, crop, (text, _, (ncols, _, word_cols, _, confs)) in zip(boxes, crops, results):
            cols = [c for word in word_cols for c in word]
            x = [(c + 0.5) / ncols * crop.shape[1] for c in cols]
            spaced = " ".join(respace(text, x, word_gaps(crop)).split())
            kept = tuple(float(c) for ch, c in zip(text, confs) if ch != " ")
            if spaced and kept:
                xs, ys = box[:, 0], box[:, 1]
                pieces.append(_Piece(xs.min(), xs.max(), ys.min(), ys.max(), spaced, kept))
        return [Line(p.text, float(np.mean(p.confs)), p.confs) for p in _join_rows(pieces)]
