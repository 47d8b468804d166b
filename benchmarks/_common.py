"""Helpers every benchmark script shares."""

from __future__ import annotations

import contextlib
import os
import platform
from pathlib import Path


def machine() -> str:
    """The CPU model and count, for the report's JSON line."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}, {os.cpu_count()} cpus, {platform.system()}"
