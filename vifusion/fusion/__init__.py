"""Fusion: per-frame features in, large fused transfers out, one stream per destination.

``Aggregator`` (one Ray actor per node, ``start_aggregators``) merges the local extractors'
frames (handed over through its local socket, ``Handoff``), drops temporal near-duplicates
(``TemporalDedup``) and flushes per-destination ``FusionBuffer`` s by the ``FlushPolicy``;
``comm/`` moves and encodes what it sends.
"""

from vifusion.fusion.aggregator import Aggregator, start_aggregators
from vifusion.fusion.buffer import FRAME_BYTES, FusionBuffer
from vifusion.fusion.dedup import TemporalDedup
from vifusion.fusion.handoff import AggregatorLost, Handoff
from vifusion.fusion.policy import FlushPlan, FlushPolicy

__all__ = ["FRAME_BYTES", "Aggregator", "AggregatorLost", "FlushPlan", "FlushPolicy", "FusionBuffer", "Handoff",
           "TemporalDedup", "start_aggregators"]
