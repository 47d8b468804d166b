"""Fusion: merge per-frame features into large `FusedBatch` transfers per destination."""

from vifusion.fusion.buffer import FusionBuffer, Fuser

__all__ = ["FusionBuffer", "Fuser"]
