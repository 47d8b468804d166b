"""The whole cores this process may use: its CPU affinity, capped by its cgroup's CPU quota.

``os.cpu_count()`` counts the machine's cores. Under a quota below them (a container's
``cpu.max``, a node with a CPU limit) one thread per machine core spins waiting for threads
the quota has descheduled, and a frame costs two to three times its CPU.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath


def usable_cores() -> int:
    """min(CPUs in this process's affinity, floor(the smallest CPU quota of its cgroup and
    its ancestors)), at least 1. Floored, as Go's automaxprocs does: a thread for a fraction
    of a core only spins. A quota that cannot be read counts as none."""
    return _cores(Path("/"))


def _cores(root: Path) -> int:
    """``usable_cores`` with /proc and /sys read under ``root`` (a fake tree in tests)."""
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
    else:  # macOS: no affinity, no cgroups
        cores = os.cpu_count() or 1
    quota = _quota(root)
    return cores if quota is None else max(1, min(cores, math.floor(quota)))


def _quota(root: Path) -> float | None:
    """The smallest CPU quota, in cores, of this process's cgroup and its ancestors up to
    the mount root, in cgroup v2 and in v1's cpu controller; None: no quota (or unreadable)."""
    try:
        groups = (root / "proc/self/cgroup").read_text().splitlines()
        mounts = (root / "proc/self/mountinfo").read_text().splitlines()
    except (OSError, ValueError):  # ValueError: a mount point's name that is not UTF-8
        return None
    quotas = [
        q
        for mount_root, mount_point, v2 in _cpu_mounts(mounts)
        for d in _up(root, mount_root, mount_point, _cgroup_path(groups, v2))
        if (q := _read_v2(d) if v2 else _read_v1(d)) is not None
    ]
    return min(quotas, default=None)


def _cgroup_path(groups: list[str], v2: bool) -> str | None:
    """This process's cgroup in the v2 hierarchy (``0::/path``) or in v1's cpu hierarchy
    (``N:cpu,cpuacct:/path``), from /proc/self/cgroup's lines."""
    for line in groups:
        parts = line.split(":", 2)
        if len(parts) < 3:
            continue
        number, controllers, path = parts
        if v2 and number == "0" and not controllers:
            return path
        if not v2 and "cpu" in controllers.split(","):
            return path
    return None


def _cpu_mounts(mounts: list[str]) -> Iterator[tuple[str, str, bool]]:
    """(mount root, mount point, is v2) of the first cgroup v2 mount and of the first v1
    mount holding the cpu controller, from /proc/self/mountinfo's lines (``ID PARENT DEV
    ROOT POINT OPTIONS [TAGS...] - TYPE SOURCE SUPER_OPTIONS``)."""
    seen: set[bool] = set()
    for line in mounts:
        fields = line.split()
        if "-" not in fields[6:]:
            continue
        after = fields[fields.index("-", 6) + 1 :]
        if len(after) < 3:
            continue
        v2 = after[0] == "cgroup2"
        if (v2 or (after[0] == "cgroup" and "cpu" in after[2].split(","))) and v2 not in seen:
            seen.add(v2)
            yield _unescape(fields[3]), _unescape(fields[4]), v2


def _unescape(field: str) -> str:
    """A mountinfo path with its octal escapes (``\\040`` for a space) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _up(root: Path, mount_root: str, mount_point: str, cgroup: str | None) -> Iterator[Path]:
    """The directories of ``cgroup`` and of its ancestors up to the mount's root; none where
    the cgroup lies outside what the mount shows."""
    if cgroup is None:
        return
    try:
        rel = PurePosixPath(cgroup).relative_to(mount_root)
    except ValueError:
        return
    if ".." in rel.parts:
        return
    top = root / mount_point.lstrip("/")
    d = top / rel
    while d != top:
        yield d
        d = d.parent
    yield top


def _read_v2(d: Path) -> float | None:
    """``cpu.max``: "max PERIOD" (no quota) or "QUOTA PERIOD" (microseconds)."""
    try:
        quota, period = (d / "cpu.max").read_text().split()
        return None if quota == "max" else _ratio(int(quota), int(period))
    except (OSError, ValueError):
        return None


def _read_v1(d: Path) -> float | None:
    """``cpu.cfs_quota_us`` (-1: no quota) over ``cpu.cfs_period_us``."""
    try:
        quota = int((d / "cpu.cfs_quota_us").read_text())
        period = int((d / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return _ratio(quota, period)


def _ratio(quota: int, period: int) -> float | None:
    return quota / period if quota > 0 and period > 0 else None
