"""Comm: move fused batches between nodes."""

from vifusion.comm.transport import Transport, TransportStats

__all__ = ["Transport", "TransportStats"]
