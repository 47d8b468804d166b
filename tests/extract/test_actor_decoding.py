"""How an extractor decodes: on its GPU's video engine only where it has the GPU alone, and
its codec threads by where its model runs."""

from __future__ import annotations

from vifusion.config import Config
from vifusion.extract.actor import decode_on_gpu, decode_threads


def test_nvdec_only_for_an_extractor_alone_on_its_gpu() -> None:
    cfg = Config()
    assert decode_on_gpu(cfg, sharing=1, gpu=True)
    assert not decode_on_gpu(cfg, sharing=2, gpu=True)  # several: slower than the cores
    assert not decode_on_gpu(cfg, sharing=1, gpu=False)
    assert not decode_on_gpu(cfg.model_copy(update={"decode_gpu": False}), sharing=1, gpu=True)


def test_codec_threads_take_the_cores_only_where_the_model_is_on_a_gpu() -> None:
    cfg = Config()  # cfg.threads: the cores this process may use
    assert decode_threads(cfg, sharing=1, gpu=True) == cfg.threads
    assert decode_threads(cfg, sharing=cfg.threads + 1, gpu=True) == 1
    assert decode_threads(cfg, sharing=1, gpu=False) == 1
    assert decode_threads(cfg.model_copy(update={"decode_threads": 3}), 1, gpu=False) == 3
