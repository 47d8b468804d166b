"""Comm: fused batches between nodes, compressed only while a link is congested.
``LinkMonitor`` measures a link, ``CodecPolicy`` picks a ``Ladder`` rung, ``Transport`` sends
(on the shard stream where it is open, else by actor call)."""

from vifusion.comm.adaptive import CodecPolicy, Rung
from vifusion.comm.codec import Encoded, Ladder, SharedTables
from vifusion.comm.link import LinkMonitor, LinkStats
from vifusion.comm.message import WireBatch
from vifusion.comm.transport import Delivery, Transport

__all__ = [
    "CodecPolicy",
    "Delivery",
    "Encoded",
    "Ladder",
    "LinkMonitor",
    "LinkStats",
    "Rung",
    "SharedTables",
    "Transport",
    "WireBatch",
]
