"""deploy/netbed.py with real traffic: delay, rate limits, rate changes, Ray across hosts, teardown.

Timing bounds are loose on purpose: they tell "rate-limited" from "not", nothing finer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.netbed import NetBed, available

pytestmark = [pytest.mark.netbed, pytest.mark.slow]  # the bed itself: its benchmarks use it
ROOT = Path(__file__).resolve().parents[2]

# One helper for both ends: `serve PORT` (echo or sink, as the client's first byte asks),
# `ping IP PORT N` (TCP round trips, one byte each) and `send IP PORT BYTES` (bulk, timed at
# the sender until the receiver confirms it has read everything).
NET_TOOL = r"""
import json, socket, sys, time

def connect(ip, port):
    for _ in range(100):  # the server may still be starting
        try:
            s = socket.create_connection((ip, port), timeout=30)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return s
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"cannot connect to {ip}:{port}")

cmd = sys.argv[1]
if cmd == "serve":
    srv = socket.create_server(("0.0.0.0", int(sys.argv[2])))
    while True:
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        mode, got = conn.recv(1), 0
        while chunk := conn.recv(1 << 20):
            if mode == b"e":
                conn.sendall(chunk)
            got += len(chunk)
        if mode == b"s":
            conn.sendall(str(got).encode())
        conn.close()
elif cmd == "ping":
    s = connect(sys.argv[2], int(sys.argv[3]))
    s.sendall(b"e")
    rtts = []
    for _ in range(int(sys.argv[4])):
        t = time.perf_counter()
        s.sendall(b"x")
        s.recv(1)
        rtts.append((time.perf_counter() - t) * 1000)
        time.sleep(0.05)
    print(json.dumps({"rtt_ms": rtts}))
elif cmd == "send":
    n = int(sys.argv[4])
    s = connect(sys.argv[2], int(sys.argv[3]))
    s.sendall(b"s")
    t = time.perf_counter()
    block = b"\0" * (1 << 16)
    for off in range(0, n, len(block)):
        s.sendall(block[: min(len(block), n - off)])
    s.shutdown(socket.SHUT_WR)
    got = int(s.recv(64))
    dt = time.perf_counter() - t
    print(json.dumps({"bytes": got, "s": dt, "mbit": got * 8 / dt / 1e6}))
"""

DRIVER = r"""
import json, sys, time
import numpy as np
import ray

ray.init(address=sys.argv[1], log_to_driver=False)

@ray.remote(num_cpus=0, resources={"host1": 1})
class Summer:
    def where(self):
        return ray.util.get_node_ip_address()
    def sum(self, a):
        return float(a.sum())

summer = Summer.remote()
where = ray.get(summer.where.remote())  # the actor is up before the timed call
a = np.arange(2 * 1024 * 1024, dtype=np.float64)  # 16 MiB, made in host 0's object store
t = time.perf_counter()
total = ray.get(summer.sum.remote(a))
dt = time.perf_counter() - t
nodes = [{"ip": n["NodeManagerAddress"], "alive": n["Alive"]} for n in ray.nodes()]
print(json.dumps({"where": where, "sum": total, "s": dt, "nodes": nodes}))
"""


def needs(delay: bool = True) -> None:
    if reason := available(delay):
        pytest.skip(reason)


def run_json(proc: subprocess.Popen, timeout: float) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def ns_ids(bed: str) -> set[str]:
    """The bed's namespaces as /proc/PID/ns/net shows them ("net:[inode]")."""
    return {f"net:[{os.stat(f'/run/netns/{ns}').st_ino}]" for ns in namespaces(bed)}


def live_in(ids: set[str]) -> list[int]:
    """Live (not zombie) processes in any of these network namespaces."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if (
                proc.name.isdigit()
                and os.readlink(proc / "ns/net") in ids
                and (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
            ):
                found.append(int(proc.name))
        except OSError:
            continue  # gone meanwhile
    return found


def namespaces(bed: str) -> list[str]:
    out = subprocess.run(
        ["ip", "netns", "list"], check=False, capture_output=True, text=True
    ).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"{bed}-")]


def net_tool(tmp_path: Path) -> Path:
    tool = tmp_path / "net.py"
    tool.write_text(NET_TOOL)
    return tool


PIPES = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}


def test_delay_and_rate_limit_with_live_rate_change(tmp_path):
    needs()
    tool, py, pipes = net_tool(tmp_path), sys.executable, PIPES
    with NetBed(hosts=2, rate="20mbit", delay_ms=5) as bed:
        h1 = bed.hosts[1].ip
        bed.exec(1, [py, str(tool), "serve", "5000"], stdout=subprocess.DEVNULL)

        ping = run_json(bed.exec(0, [py, str(tool), "ping", h1, "5000", "5"], **pipes), 30)
        # Two one-way delays; the shaper adds nothing to a one-byte packet.
        assert min(ping["rtt_ms"]) >= 10.0, ping
        assert max(ping["rtt_ms"]) < 100.0, ping

        size = 8 * 1024 * 1024
        tx0, rx1 = bed.tx_bytes(0), bed.rx_bytes(1)
        fast = run_json(bed.exec(0, [py, str(tool), "send", h1, "5000", str(size)], **pipes), 30)
        assert fast["bytes"] == size
        assert 10.0 <= fast["mbit"] <= 25.0, fast
        # Counters count IP packets: payload plus headers, so at least the payload.
        assert bed.tx_bytes(0) - tx0 >= size
        assert bed.rx_bytes(1) - rx1 >= size

        bed.set_rate(0, "5mbit")
        size = 2 * 1024 * 1024
        slow = run_json(bed.exec(0, [py, str(tool), "send", h1, "5000", str(size)], **pipes), 30)
        assert slow["bytes"] == size
        assert slow["mbit"] <= 7.0, slow
        print(
            f"\nrtt_ms {ping['rtt_ms']}\n20mbit: {fast['mbit']:.1f} Mbit/s, "
            f"5mbit: {slow['mbit']:.1f} Mbit/s"
        )


def test_a_shaped_downlink_slows_what_the_host_receives_not_what_it_sends(tmp_path):
    needs()
    tool, py, pipes = net_tool(tmp_path), sys.executable, PIPES
    with NetBed(hosts=2, rate="1gbit", delay_ms=5) as bed:
        bed.set_downlink(1, "10mbit")
        for host in (0, 1):
            bed.exec(host, [py, str(tool), "serve", "5000"], stdout=subprocess.DEVNULL)
        size = 4 * 1024 * 1024
        into = run_json(
            bed.exec(0, [py, str(tool), "send", bed.hosts[1].ip, "5000", str(size)], **pipes), 30
        )
        out = run_json(
            bed.exec(1, [py, str(tool), "send", bed.hosts[0].ip, "5000", str(size)], **pipes), 30
        )
        assert into["bytes"] == out["bytes"] == size
        assert into["mbit"] <= 12.0, into
        assert out["mbit"] >= 30.0, out  # host 1's uplink is still the bed's 1 Gbit
        bed.set_downlink(1, "40mbit")  # changed in place, as set_rate does
        again = run_json(
            bed.exec(0, [py, str(tool), "send", bed.hosts[1].ip, "5000", str(size)], **pipes), 30
        )
        assert 15.0 <= again["mbit"] <= 45.0, again
        print(
            f"\ninto host 1: {into['mbit']:.1f}, then {again['mbit']:.1f}; out: {out['mbit']:.1f}"
        )


def test_a_process_in_a_host_reads_the_cpu_quota_of_its_cgroup(tmp_path):
    # `ip netns exec` hides the machine's cgroup mounts; the bed mounts them again, so a
    # host's process moved into a cgroup of 0.5 core sizes its threads by it (one).
    needs(delay=False)
    group = Path("/sys/fs/cgroup/cpu") / f"vifusion-test-bed-{os.getpid()}"
    if not (group.parent / "cpu.cfs_quota_us").exists():
        pytest.skip("no writable cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
    group.mkdir()
    try:
        (group / "cpu.cfs_quota_us").write_text("50000")
        code = "import sys; sys.stdin.readline(); from vifusion._cores import usable_cores; print(usable_cores())"
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
        with NetBed(hosts=1, cgroups=True) as bed:
            inside = bed.exec(0, [sys.executable, "-c", code], cwd=str(ROOT), **pipes)
            moved = bed.exec(0, [sys.executable, "-c", code], cwd=str(ROOT), **pipes)
            time.sleep(0.5)  # both past `ip netns exec` and its mounts: python itself now
            (group / "cgroup.procs").write_text(str(moved.pid))
            out = [p.communicate("\n", timeout=60)[0].strip() for p in (moved, inside)]
        assert out == ["1", str(len(os.sched_getaffinity(0)))]
    finally:
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_ray_actor_on_host1_gets_16mb_across_the_link(tmp_path):
    needs()
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    with NetBed(hosts=2, rate="100mbit", delay_ms=5) as bed:
        address = bed.start_ray(num_cpus=1)
        assert address == f"{bed.hosts[0].ip}:6380"
        rx1 = bed.rx_bytes(1)
        proc = bed.exec(
            0,
            [sys.executable, str(driver), address],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out = run_json(proc, 120)
        n = 2 * 1024 * 1024
        assert out["sum"] == n * (n - 1) / 2
        assert out["where"] == bed.hosts[1].ip
        assert bed.rx_bytes(1) - rx1 >= 16 * 1024 * 1024
        alive = sorted(node["ip"] for node in out["nodes"] if node["alive"])
        assert alive == [h.ip for h in bed.hosts]
        print(f"\nRay 16 MiB host0 -> host1 at 100mbit, 5 ms: {out['s']:.2f} s")
        name, ids = bed.bed, ns_ids(bed.bed)
        assert len(live_in(ids)) > 5  # Ray's daemons and workers
    assert namespaces(name) == []
    assert live_in(ids) == []
    assert not bed.ray_temp_dir.exists()


def wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    return predicate()


def test_down_leaves_nothing_even_after_an_exception(tmp_path):
    needs()
    tool = tmp_path / "net.py"
    tool.write_text(NET_TOOL)
    bed = NetBed(hosts=3, rate="50mbit", delay_ms=1).up()
    try:
        name, ids = bed.bed, ns_ids(bed.bed)
        assert len(ids) == 4  # three hosts and the switch
        sleeper = bed.exec(2, ["sleep", "600"])
        # the sleeper (once `ip netns exec` has entered the namespace) and the delay line
        assert wait_for(lambda: len(live_in(ids)) == 2)
    finally:
        bed.down()
    bed.down()  # idempotent
    assert namespaces(name) == [] and live_in(ids) == []
    assert sleeper.poll() is not None

    # no delay: veth wires and a bridge
    with pytest.raises(RuntimeError, match="boom"), NetBed(hosts=2, rate="1gbit") as plain:
        name, ids = plain.bed, ns_ids(plain.bed)
        assert plain.hosts[1].ip == "10.77.0.2"
        plain.exec(1, [sys.executable, str(tool), "serve", "5000"])
        ping = plain.exec(
            0,
            [sys.executable, str(tool), "ping", "10.77.0.2", "5000", "3"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert max(run_json(ping, 30)["rtt_ms"]) < 10.0  # the bridge works, and has no delay
        assert wait_for(lambda: len(live_in(ids)) == 1)  # the server
        raise RuntimeError("boom")
    assert namespaces(name) == [] and live_in(ids) == []


def test_each_host_has_a_disk_of_its_own(tmp_path):
    """Hosts share no file under ``disk``: what one writes there, the others never see."""
    needs()
    shared = tmp_path / "disk"
    with NetBed(hosts=2, rate="1gbit", disk=str(shared)) as bed:
        for i in range(2):
            assert bed.exec(i, ["sh", "-c", f"echo h{i} > {shared}/who"]).wait(30) == 0
        seen = [
            bed.exec(i, ["cat", f"{shared}/who"], stdout=subprocess.PIPE, text=True)
            .communicate(timeout=30)[0]
            .strip()
            for i in range(2)
        ]
        assert seen == ["h0", "h1"]
        assert not (shared / "who").exists()  # nothing lands on the machine's own disk
        assert (bed.disk_dir(1) / "who").read_text().strip() == "h1"
        disks = bed.disk_dir(0).parent
    assert not disks.exists()  # down() removes them


KILLED_IN_BED = r"""
import subprocess, sys, time
import ray
from deploy.netbed import NetBed
# Ray's driver puts in a SIGTERM handler of its own, which skips `finally` blocks.
ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
ray.shutdown()
with NetBed(hosts=2, rate="1gbit") as bed:
    bed.exec(1, ["sleep", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(bed.bed, flush=True)
    time.sleep(600)
"""


def test_a_kill_tears_the_bed_down_even_in_a_process_that_ran_ray(tmp_path):
    """`timeout` or a CI cancel sends SIGTERM: the bed must not outlive its process."""
    needs(delay=False)
    script = tmp_path / "killed.py"
    script.write_text(KILLED_IN_BED)
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    try:
        name = proc.stdout.readline().strip()
        assert name, proc.communicate(timeout=30)[1][-2000:]
        ids = ns_ids(name)
        assert wait_for(lambda: len(live_in(ids)) == 1)  # the sleeper
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    assert namespaces(name) == [] and live_in(ids) == []
