"""The query text model without torch (ONNX export, onnxruntime, `tokenizers`): the same
vectors as the torch model a search would otherwise load, for short, long and non-ASCII text."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vifusion.extract import _text_onnx
from vifusion.extract.text import TextEncoder

QUERIES = [
    "a cat",
    "A Cat sitting on the MAT, with a hat!",
    "Ünïcödé café naïve résumé, 東京タワー 🐱 Привет мир",
    "the rocket launch "
    * 120,  # past the 256 tokens the model takes: cut as the torch tokenizer cuts
    "x",
    "   spaced    out   ",
    "C++ vs. C#: 3.14159 (approx.) -- e-mail@example.com [brackets] {braces}",
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return _text_onnx.export(tmp_path_factory.mktemp("models"))


def test_the_onnx_vectors_are_the_torch_ones(exported):
    here = _text_onnx.TextEmbedder(exported).embed_text(QUERIES)
    there = TextEncoder(torch.device("cpu")).encode(QUERIES)
    assert here.shape == there.shape == (len(QUERIES), 384) and here.dtype == np.float32
    cosines = (here * there).sum(axis=1)
    assert cosines.min() > 0.9999, cosines


def test_the_export_is_named_by_the_weights_and_made_once(exported):
    assert exported.name == f"minilm-l6-v1-{_text_onnx.weights_hash()[:16]}.onnx"
    assert exported == _text_onnx.onnx_path(exported.parent)
    made = exported.stat().st_mtime_ns
    assert _text_onnx.export(exported.parent) == exported
    assert exported.stat().st_mtime_ns == made
    assert [p.name for p in exported.parent.iterdir() if p.suffix != ".lock"] == [
        exported.name
    ]  # no temp left


def test_an_export_of_other_weights_is_replaced(tmp_path):
    stale = tmp_path / "minilm-l6-v1-0123456789abcdef.onnx"
    stale.write_bytes(b"an export of weights since replaced")
    made = _text_onnx.export(tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.onnx")) == [made.name]


def test_the_weights_hash_is_the_files(exported):
    import hashlib

    with open(_text_onnx._model_dir() / "model.safetensors", "rb") as f:
        assert _text_onnx.weights_hash() == hashlib.file_digest(f, "sha256").hexdigest()
