"""ViFusion: index video, find moments in it. What callers use: ``Service`` (the library
behind the REST API), ``Config``, ``Client`` (the REST API over HTTP) and the ``vifusion``
command (``vifusion.cli``); the other modules are the stages behind them."""

from __future__ import annotations

import importlib
from typing import Any

from vifusion.config import Config

__all__ = ["ApiError", "Client", "Config", "NotFound", "Service"]
__version__ = "0.1.0"

# Imported on first use: ``Service`` brings Ray and the models, which a text search in the
# command line's process does without.
_LAZY = {
    "ApiError": "vifusion.client",
    "Client": "vifusion.client",
    "NotFound": "vifusion.service",
    "Service": "vifusion.service",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
