"""Comm: move fused batches between nodes, watching each link and compressing only while it
is congested.

``LinkMonitor`` measures a link from its own transfers, ``CodecPolicy`` picks a rung of the
codec ``Ladder`` (fp32, fp16, int8, sparse, pq) from those statistics, and ``Transport``
encodes, sends and collects acknowledgements: on the shard stream (``stream.py``, TCP to
the shard's primary) where it is open, else by actor call, the path chosen by size.
"""

from vifusion.comm.adaptive import CodecPolicy, Rung
from vifusion.comm.codec import Encoded, Ladder, SharedTables
from vifusion.comm.link import LinkMonitor, LinkStats
from vifusion.comm.message import WireBatch
from vifusion.comm.transport import Delivery, Transport

__all__ = ["CodecPolicy", "Delivery", "Encoded", "Ladder", "LinkMonitor", "LinkStats", "Rung", "SharedTables",
           "Transport", "WireBatch"]
