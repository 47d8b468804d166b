"""`vifusion`: the command line. ``main`` is the entry point."""

from vifusion.cli.parser import main

__all__ = ["main"]
