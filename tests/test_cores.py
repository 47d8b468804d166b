"""usable_cores: CPU affinity capped by the floor of the smallest cgroup CPU quota on the way
up, in cgroup v1 and v2; read from fake /proc and /sys trees, and once from a real cgroup."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from vifusion._cores import _cores, usable_cores
from vifusion.config import Config

AFFINITY = len(os.sched_getaffinity(0))
REPO = Path(__file__).resolve().parents[1]

# The v2 mount of a plain v2 host; this machine's hybrid layout for v1 (cpuset mounted
# apart, so that "cpu" must not match "cpuset", and an unified mount without cpu files).
V2_MOUNTS = "30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
V1_MOUNTS = (
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)


def fake_v2(root: Path, quotas: dict[str, str], cgroup: str = "/a/b") -> Path:
    """A v2 host with ``cgroup``, and ``cpu.max`` written in the cgroups ``quotas`` names
    (relative to the mount: "" is its root)."""
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text(f"0::{cgroup}\n")
    (root / "proc/self/mountinfo").write_text(V2_MOUNTS)
    top = root / "sys/fs/cgroup"
    (top / cgroup.lstrip("/")).mkdir(parents=True)
    for rel, text in quotas.items():
        (top / rel / "cpu.max").write_text(text + "\n")
    return root


def fake_v1(root: Path, quotas: dict[str, str], cgroup: str = "/a/b") -> Path:
    """A v1 host with ``cgroup`` in every hierarchy; ``quotas``: "QUOTA PERIOD" by cgroup, as
    ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us``."""
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text(f"4:cpu,cpuacct:{cgroup}\n3:cpuset:/\n0::/\n")
    (root / "proc/self/mountinfo").write_text(V1_MOUNTS)
    (root / "sys/fs/cgroup/cpuset/cpu.cfs_quota_us").parent.mkdir(parents=True)
    (root / "sys/fs/cgroup/cpuset/cpu.cfs_quota_us").write_text("10000\n")  # not cpu's
    top = root / "sys/fs/cgroup/cpu,cpuacct"
    (top / cgroup.lstrip("/")).mkdir(parents=True)
    for rel, text in quotas.items():
        quota, period = text.split()
        (top / rel / "cpu.cfs_quota_us").write_text(quota + "\n")
        (top / rel / "cpu.cfs_period_us").write_text(period + "\n")
    return root


V2_CASES = [
    ({"a/b": "70000 100000"}, 1),
    ({"a/b": "250000 100000"}, min(AFFINITY, 2)),
    ({"a/b": "max 100000", "": "max 100000"}, AFFINITY),
    ({"a": "150000 100000", "a/b": "400000 100000"}, 1),  # the parent's smaller quota wins
    ({"a/b": "400000 100000", "": "100000 100000"}, 1),  # so does the mount root's
    ({}, AFFINITY),  # no cpu.max anywhere
    ({"a/b": "garbage"}, AFFINITY),
]
V1_CASES = [
    ({"a/b": "70000 100000"}, 1),
    ({"a/b": "250000 100000"}, min(AFFINITY, 2)),
    ({"a/b": "-1 100000", "": "-1 100000"}, AFFINITY),
    ({"a": "150000 100000", "a/b": "400000 100000"}, 1),
    ({"a/b": "400000 100000", "": "100000 100000"}, 1),
    ({}, AFFINITY),
    ({"a/b": "50000 0"}, AFFINITY),
]


@pytest.mark.parametrize("quotas, cores", V2_CASES)
def test_v2_quota(tmp_path: Path, quotas: dict[str, str], cores: int) -> None:
    assert _cores(fake_v2(tmp_path, quotas)) == cores


@pytest.mark.parametrize("quotas, cores", V1_CASES)
def test_v1_quota(tmp_path: Path, quotas: dict[str, str], cores: int) -> None:
    assert _cores(fake_v1(tmp_path, quotas)) == cores


def test_v1_mount_of_a_subtree(tmp_path: Path) -> None:
    # A container without a cgroup namespace: the mount shows /kube/pod, where the quota is.
    fake_v1(tmp_path, {}, cgroup="/c")
    mounts = "32 31 0:29 /kube/pod /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct\n"
    (tmp_path / "proc/self/mountinfo").write_text(mounts)
    (tmp_path / "proc/self/cgroup").write_text("4:cpu,cpuacct:/kube/pod/c\n")
    top = tmp_path / "sys/fs/cgroup/cpu"
    (top / "c").mkdir(parents=True)
    (top / "cpu.cfs_quota_us").write_text("120000\n")
    (top / "cpu.cfs_period_us").write_text("100000\n")
    assert _cores(tmp_path) == 1


def test_nothing_readable_is_no_limit(tmp_path: Path) -> None:
    assert _cores(tmp_path) == AFFINITY


def test_config_threads_are_the_usable_cores() -> None:
    assert Config().threads == usable_cores()


def _writable_cpu_controller() -> tuple[Path, bool] | None:
    """(mount point, is v2) of a cpu controller this process can make cgroups in."""
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_quota_us").is_file() and os.access(v1, os.W_OK):
        return v1, False
    for v2 in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        try:  # a child has cpu.max only where its parent hands the controller down
            handed_down = "cpu" in (v2 / "cgroup.subtree_control").read_text().split()
        except OSError:
            continue
        if handed_down and os.access(v2, os.W_OK):
            return v2, True
    return None


def _cores_in_subprocess(cgroup: Path | None) -> int:
    code = "from vifusion._cores import usable_cores; print(usable_cores())"
    run = f"exec {shlex.quote(sys.executable)} -c {shlex.quote(code)}"
    if cgroup is not None:
        run = f"echo $$ > {shlex.quote(str(cgroup / 'cgroup.procs'))}; {run}"
    out = subprocess.run(
        ["sh", "-c", run], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    return int(out.stdout)


def test_real_cgroup_of_half_a_core() -> None:
    if os.geteuid() != 0:
        pytest.skip("making a cgroup needs root")
    found = _writable_cpu_controller()
    if found is None:
        pytest.skip("no writable cpu controller (v1 /sys/fs/cgroup/cpu, or v2 handing down cpu)")
    mount, v2 = found
    cgroup = mount / f"vifusion-test-cores-{os.getpid()}"
    cgroup.mkdir()
    try:
        if v2:
            (cgroup / "cpu.max").write_text("50000 100000")
        else:
            (cgroup / "cpu.cfs_period_us").write_text("100000")
            (cgroup / "cpu.cfs_quota_us").write_text("50000")
        assert _cores_in_subprocess(cgroup) == 1
    finally:
        cgroup.rmdir()  # its one process has exited: subprocess.run waited for it
    assert _cores_in_subprocess(None) == AFFINITY
