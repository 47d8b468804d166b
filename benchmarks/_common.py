"""Helpers every benchmark script shares."""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import sys
from collections.abc import Callable
from pathlib import Path

# The photos (vifusion.samples.PHOTOS) the bed benchmarks' videos are made of, in the order
# that pairs them (video i shows photo i and photo i + 3): their workloads stay as measured.
BED_PHOTOS = [
    "coffee",
    "chelsea",
    "rocket",
    "astronaut",
    "hubble",
    "motorcycle",
    "camera",
    "coins",
    "ihc",
    "retina",
]


def machine() -> str:
    """The CPU model and count, for the report's JSON line."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}, {os.cpu_count()} cpus, {platform.system()}"


def descendants() -> list[int]:
    """The pids of every process below this one (a local Ray cluster started here: its GCS,
    raylet and workers), whatever else the host runs."""
    parent: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                parent[int(entry.name)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
    me, out = os.getpid(), []
    for pid in parent:
        p, hops = pid, 0
        while p not in (me, 0, 1) and hops < 64:
            p, hops = parent.get(p, 0), hops + 1
        if p == me and pid != me:
            out.append(pid)
    return out


def cpu_seconds(pid: int | str) -> float:
    """User + system CPU seconds a process has used so far (``/proc/<pid>/stat``); raises
    OSError once it is gone."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_benchmark(main: Callable[[], int], name: str) -> None:
    """Exit with ``main()``'s status. A kill (SIGTERM: ``timeout``, a CI cancel) unwinds like
    Ctrl-C (the test bed does the same inside its ``with`` block, where Ray may have put in
    a handler of its own), so temp dirs and beds are removed, and the run ends with one
    line saying it was interrupted, status 130."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        code = main()
    except KeyboardInterrupt:
        print(f"{name}: interrupted; what it had set up is torn down", file=sys.stderr)
        code = 130
    raise SystemExit(code)
