"""Fusion: per-frame features in, large fused transfers out, one stream per destination.
``Aggregator`` (one per node) dedups its extractors' frames and flushes a ``FusionBuffer``
per destination as the ``FlushPolicy`` plans."""

from vifusion.fusion.aggregator import Aggregator, start_aggregators
from vifusion.fusion.buffer import FRAME_BYTES, FusionBuffer
from vifusion.fusion.dedup import TemporalDedup
from vifusion.fusion.handoff import AggregatorLost, Handoff
from vifusion.fusion.policy import FlushPlan, FlushPolicy

__all__ = [
    "FRAME_BYTES",
    "Aggregator",
    "AggregatorLost",
    "FlushPlan",
    "FlushPolicy",
    "FusionBuffer",
    "Handoff",
    "TemporalDedup",
    "start_aggregators",
]
