"""ViFusion: index video, find moments in it."""

from vifusion.config import Config

__all__ = ["Config"]
__version__ = "0.1.0"
