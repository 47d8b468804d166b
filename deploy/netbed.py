"""A multi-host network test bed on one Linux machine: network namespaces, shaped links, Ray.

Each "host" is a network namespace `<bed>-h<i>` (the bed name is the prefix plus the first
free number: `vfnb0`, `vfnb1`, ... so two beds, or the leftovers of a crashed one, never
clash) with the address 10.77.0.<i+1>/24 and `lo` up. The hosts hang off one "switch"
namespace `<bed>-sw`; nothing is ever created in the root namespace, so a bed cannot disturb
the machine's own network or another Ray instance running there.

delay_ms == 0, plain wires (full kernel speed; ~1 Gbit and more)::

    h0: eth0 ==veth== h0 --+
    h1: eth0 ==veth== h1 --+-- br0 (bridge, in <bed>-sw)
    ...

delay_ms > 0, a delay line (this kernel has no netem)::

    h0: tun0 --+
    h1: tun0 --+-- deploy/_delayline.py (one process, in <bed>-sw): holds every packet
    ...        |   delay_ms, then writes it to the TUN of the destination host

    The TUN devices get a 9000-byte MTU (jumbo frames) by default: the line is a Python loop
    whose cost is per packet (no GSO through a TUN), and 9000 instead of 1500 bytes cuts the
    packet rate ~6x. Measured with 5 ms: 100 Mbit costs ~5% of a core (8% at MTU 1500);
    1 Gbit gets ~950 Mbit/s for ~15% of a core. 16000 gains little more. A bed without delay
    uses plain veth wires (1500, with GSO): no userspace hop at all.

Rate: each host's egress device (eth0 or tun0) has a `tbf` root qdisc, so the path A -> B
is shaped by A's uplink, as on a real network; `set_rate` changes one host's uplink while
traffic runs. `set_downlink` shapes what a host receives too (an IFB device behind its
link's ingress), for a host whose link is slow both ways. The bucket is at least 64 KiB, two
MTUs and 2 ms worth of the rate, so it is never the limit (a bucket smaller than a packet
would drop that packet forever).

Ray: `start_ray` runs `ray start --head --block` in host 0 and `ray start --block --address`
in the others, each with the custom resource `host<i>` (100) so callers can pin actors to a
host with `resources={"host1": 1}`. Namespaces have their own port space, so every node uses
the same fixed ports (GCS 6380); temp dirs live under /tmp/<bed>-ray/h<i>. Token auth stays
on: every "host" shares the filesystem, hence the same ~/.ray/auth_token, but Ray 2.60 only
switches it on by itself in the head, so the bed sets RAY_AUTH_MODE=token (when a token
exists) for every Ray process and every process started with `exec` after `start_ray`.

A driver must run inside a host to reach the bed (the root namespace has no route to it)::

    with NetBed(hosts=2, rate="100mbit", delay_ms=5) as bed:
        address = bed.start_ray()
        driver = bed.exec(0, [sys.executable, "driver.py", address])  # ray.init(address=...)
        driver.wait()
        bed.set_rate(1, "10mbit")             # host 1's uplink, while running
        print(bed.rx_bytes(1), bed.tx_bytes(1))

From a shell::

    python deploy/netbed.py up --hosts 3 --rate 100mbit --delay-ms 5   # Ctrl-C tears down
    RAY_AUTH_MODE=token ip netns exec vfnb0-h0 python driver.py   # as `up` prints it
    python deploy/netbed.py down --prefix vfnb   # leftovers of a crashed run

With `cgroups=True` a host's processes see the machine's cgroup hierarchies, as processes on
a real host do (`ip netns exec` hides them), so a process in a CPU cgroup can read its quota.

`down()` (also on leaving the `with` block: exception, Ctrl-C or SIGTERM) kills every
process in the bed's namespaces, Ray's daemons included, stops the delay line, deletes the
namespaces (and with them every device) and the temp dir. Needs root, `ip`, `tc` and, for
delays, /dev/net/tun.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

SUBNET = "10.77.0"
RAY_PORT = 6380  # outside Ray's default worker range (10002-19999)
DASHBOARD_PORT = 8265
TUN_MTU = 9000
DELAY_LINE = Path(__file__).with_name("_delayline.py")

# Waits for a number of alive nodes through the GCS client, without the cost of ray.init.
_WAIT_NODES = """
import sys, time
from ray._raylet import GcsClient
address, want, deadline = sys.argv[1], int(sys.argv[2]), time.time() + float(sys.argv[3])
client = GcsClient(address=address)
while True:
    try:
        infos = client.get_all_node_info(timeout=2).values()
        if sum(info.state == 0 for info in infos) >= want:  # 0 == ALIVE
            sys.exit(0)
    except Exception:
        pass  # the GCS is not up yet
    if time.time() > deadline:
        sys.exit(f"{want} Ray nodes not alive at {address}")
    time.sleep(0.3)
"""


def _ray_auth_mode() -> str:
    """The RAY_AUTH_MODE every process of the bed's cluster gets.

    Ray 2.60 turns token auth on by itself only in `ray start --head` (when a token exists);
    `ray start --address` and `ray.init(address=...)` stay 'disabled' unless told, and then
    fail to authenticate. So the bed says it explicitly, and the same everywhere."""
    if mode := os.environ.get("RAY_AUTH_MODE"):
        return mode
    token_file = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    return "token" if os.environ.get("RAY_AUTH_TOKEN") or os.path.exists(token_file) else "disabled"


@dataclass(frozen=True)
class Host:
    name: str  # network namespace, e.g. "vfnb0-h0"
    ip: str  # e.g. "10.77.0.1"
    resource: str  # Ray custom resource only this host's node has (value 100), e.g. "host0"


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, check=False, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip() or result.stdout.strip()}")
    return result


def _rate_bps(rate: str) -> float:
    """A tc rate ("100mbit", "1gbit", "500kbps") in bits per second."""
    units = {
        "bit": 1,
        "kbit": 1e3,
        "mbit": 1e6,
        "gbit": 1e9,
        "tbit": 1e12,
        "bps": 8,
        "kbps": 8e3,
        "mbps": 8e6,
        "gbps": 8e9,
        "tbps": 8e12,
    }
    match = re.fullmatch(r"([0-9.]+)\s*([a-z]*)", rate.strip().lower())
    if not match or (match[2] or "bit") not in units:
        raise ValueError(f"not a tc rate: {rate!r}")
    return float(match[1]) * units[match[2] or "bit"]


def _tbf(rate: str, mtu: int) -> list[str]:
    burst = max(64 * 1024, 2 * mtu, int(_rate_bps(rate) / 8 * 0.002))
    return ["tbf", "rate", rate, "burst", str(burst), "latency", "50ms"]


@functools.cache  # the machine's mounts, read once: every exec in every host needs them
def _cgroup_mounts() -> str:
    """Shell commands that mount this machine's cgroup hierarchies again where they are.
    `ip netns exec` gives its command a fresh /sys without them; a host's processes then
    could not read their CPU quota (``vifusion._cores``), as on a real machine they can."""
    cmds = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, point, kind, opts, *_ = line.split()
        if point == "/sys/fs/cgroup" and kind == "tmpfs":
            cmds.append("mount -t tmpfs cgroup /sys/fs/cgroup")
        elif point.startswith("/sys/fs/cgroup") and kind in ("cgroup", "cgroup2"):
            cmds.append(f"mkdir -p {point} && mount -t {kind} -o {opts} cgroup {point}")
    return "; ".join(cmds)


def _namespaces(pattern: str) -> list[str]:
    out = _run("ip", "-j", "netns", "list").stdout.strip()
    return [ns["name"] for ns in json.loads(out or "[]") if re.match(pattern, ns["name"])]


def _ns_pids(namespaces: list[str]) -> set[int]:
    pids: set[int] = set()
    for ns in namespaces:
        pids.update(int(p) for p in _run("ip", "netns", "pids", ns, check=False).stdout.split())
    return pids


def _kill_all(namespaces: list[str], procs: list[subprocess.Popen], grace: float = 3.0) -> None:
    """Stop every process in `namespaces`, and `procs`: SIGTERM, SIGKILL after `grace` s."""
    # All at once: stopping `ray start --block` first and letting it stop its daemons one
    # by one takes 5-10 s per node. Orphaned zombies are reaped by PID 1 soon after.
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 1.0), (signal.SIGKILL, 1.0)):
        pids = _ns_pids(namespaces) | {p.pid for p in procs if p.poll() is None}
        pids.discard(os.getpid())
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not (_ns_pids(namespaces) | {p.pid for p in procs if p.poll() is None}):
                break
            time.sleep(0.05)
    else:
        left = _ns_pids(namespaces)
        if left:
            raise RuntimeError(f"processes survive SIGKILL in {namespaces}: {sorted(left)}")
    for proc in procs:  # reap our own children, close their pipes
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream:
                stream.close()


def cleanup(prefix: str = "vfnb") -> list[str]:
    """Remove every bed with this prefix (processes, namespaces, temp dirs); returns the
    namespaces removed. For the leftovers of a crashed run; it also stops running beds."""
    namespaces = _namespaces(rf"{re.escape(prefix)}\d+-")
    _kill_all(namespaces, [])
    for ns in namespaces:
        _run("ip", "netns", "del", ns, check=False)
    for tmp in Path("/tmp").glob(f"{prefix}*-ray"):
        if re.fullmatch(rf"{re.escape(prefix)}\d+-ray", tmp.name):
            shutil.rmtree(tmp, ignore_errors=True)
    return namespaces


@functools.cache
def available(delay: bool = True) -> str | None:
    """None if this machine can run a bed (with a delay line if `delay`), else why not."""
    if os.geteuid() != 0:
        return "netbed needs root"
    for tool in ("ip", "tc"):
        if not shutil.which(tool):
            return f"netbed needs `{tool}`"
    if delay and not os.path.exists("/dev/net/tun"):
        return "netbed needs /dev/net/tun for its delay line"
    probe = f"vfnbprobe{os.getpid()}"
    try:
        _run("ip", "netns", "add", probe)
        _run("ip", "-n", probe, "link", "set", "lo", "up")
        _run("tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", *_tbf("10mbit", 1500))
    except (RuntimeError, OSError) as exc:
        return f"netbed cannot build namespaces with tbf here: {exc}"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return None


class NetBed:
    """N hosts in network namespaces, shaped links, optional delay line and Ray (see module doc)."""

    def __init__(
        self,
        hosts: int = 2,
        rate: str = "100mbit",
        delay_ms: float = 0.0,
        mtu: int | None = None,
        prefix: str = "vfnb",
        disk: str | None = None,
        cgroups: bool = False,
    ) -> None:
        """``disk``: a path (say /var/lib/vifusion) that every host sees as a disk of its
        own: each process of host i runs in a mount namespace where it is a bind mount of
        /tmp/<bed>-disk/h<i>, so hosts share no file under it, as separate machines would."""
        if not 1 <= hosts <= 250:
            raise ValueError("hosts must be in 1..250")
        _rate_bps(rate)  # fail early on a typo
        self.rate = rate
        self.delay_ms = delay_ms
        self.mtu = mtu or (TUN_MTU if delay_ms > 0 else 1500)
        self.prefix = prefix
        self.disk = disk
        self.cgroups = cgroups  # mount the machine's cgroups in each host's processes
        self.bed = ""  # "<prefix><n>", claimed by up()
        self.hosts: list[Host] = []
        self._n = hosts
        self._procs: list[subprocess.Popen] = []
        self._dev = "tun0" if delay_ms > 0 else "eth0"  # each host's link device
        self._downlinks: set[int] = set()  # hosts whose ingress is shaped (set_downlink)
        self._owned = False  # the bed name is ours: down() may remove what carries it
        self._ray_env: dict[str, str] = {}  # what every process needs to join the bed's Ray
        self._host_env: dict[int, dict[str, str]] = {}  # per host: its TLS certificate, say
        self._sigterm_set = False  # the `with` put in its SIGTERM handler in place of:
        self._sigterm: object = None  # the one before (None: set outside Python)

    # -- building -------------------------------------------------------------------------

    def up(self) -> Self:
        """Create namespaces, links and shaping (and the delay line if delay_ms > 0)."""
        try:
            self._claim()
            self.hosts = [
                Host(f"{self.bed}-h{i}", f"{SUBNET}.{i + 1}", f"host{i}") for i in range(self._n)
            ]
            for host in self.hosts:
                _run("ip", "netns", "add", host.name)
                _run("ip", "-n", host.name, "link", "set", "lo", "up")
            if self.delay_ms > 0:
                self._up_delay_line()
            else:
                self._up_bridge()
            for host in self.hosts:
                # A default route lets Ray find the node's address the usual way (the source
                # address of a route to the outside) in a driver started inside a host.
                _run("ip", "-n", host.name, "route", "add", "default", "dev", self._dev)
                _run(
                    "tc",
                    "-n",
                    host.name,
                    "qdisc",
                    "add",
                    "dev",
                    self._dev,
                    "root",
                    *_tbf(self.rate, self.mtu),
                )
        except BaseException:
            self.down()
            raise
        return self

    def _claim(self) -> None:
        # `ip netns add` creates /run/netns/NAME with O_EXCL: the switch namespace is the lock.
        for n in range(1000):
            bed = f"{self.prefix}{n}"
            if _namespaces(rf"{re.escape(bed)}-") or Path(f"/tmp/{bed}-ray").exists():
                continue  # a running bed or a leftover: keep away
            if _run("ip", "netns", "add", f"{bed}-sw", check=False).returncode == 0:
                self.bed, self._owned = bed, True
                _run("ip", "-n", f"{bed}-sw", "link", "set", "lo", "up")
                return
        raise RuntimeError(f"no free bed name {self.prefix}<n>: run `netbed.py down`")

    def _up_bridge(self) -> None:
        sw = f"{self.bed}-sw"
        _run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", sw, "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts):
            # Created inside the host namespace, its peer moved straight to the switch.
            _run(
                "ip",
                "-n",
                host.name,
                "link",
                "add",
                "eth0",
                "mtu",
                str(self.mtu),
                "type",
                "veth",
                "peer",
                "name",
                f"h{i}",
                "mtu",
                str(self.mtu),
                "netns",
                sw,
            )
            _run("ip", "-n", sw, "link", "set", f"h{i}", "master", "br0", "up")
            _run("ip", "-n", host.name, "addr", "add", f"{host.ip}/24", "dev", "eth0")
            _run("ip", "-n", host.name, "link", "set", "eth0", "up")

    def _up_delay_line(self) -> None:
        for host in self.hosts:
            _run("ip", "-n", host.name, "tuntap", "add", "dev", "tun0", "mode", "tun")
            _run("ip", "-n", host.name, "link", "set", "tun0", "mtu", str(self.mtu), "up")
            _run("ip", "-n", host.name, "addr", "add", f"{host.ip}/24", "dev", "tun0")
        argv = [sys.executable, str(DELAY_LINE), "--delay-ms", str(self.delay_ms)]
        argv += [f"{host.name}={host.ip}" for host in self.hosts]
        # stdin stays a pipe we hold: the line exits when it closes, even if we are SIGKILLed.
        line = self._exec_ns(
            f"{self.bed}-sw",
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if line.stdout.readline().strip() != "ready":
            line.wait(5)
            raise RuntimeError(f"delay line failed: {line.stderr.read().strip()}")

    # -- running --------------------------------------------------------------------------

    def _exec_ns(self, netns: str, argv: list[str], **popen_kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(["ip", "netns", "exec", netns, *argv], **popen_kwargs)
        self._procs.append(proc)
        return proc

    def exec(self, host: int, argv: list[str], **popen_kwargs) -> subprocess.Popen:
        """Run `argv` inside host `host`'s namespace; down() stops it if it is still running.
        Once Ray runs, the process also gets the bed's RAY_AUTH_MODE (unless `env` has one),
        so `ray.init(address=...)` just works in it."""
        if self._ray_env:
            base = popen_kwargs.get("env") or dict(os.environ)
            popen_kwargs["env"] = self._ray_env | self._host_env.get(host, {}) | base
        if self.disk is not None:
            own = self.disk_dir(host)
            own.mkdir(parents=True, exist_ok=True)
            argv = [
                *("unshare", "--mount", "--propagation", "private", "sh", "-c"),
                'mkdir -p "$0" && mount --bind "$1" "$0" && shift && exec "$@"',
                *(self.disk, str(own), *argv),
            ]
        if self.cgroups and (mounts := _cgroup_mounts()):
            # Best effort: where one cannot be mounted, the process runs without it.
            argv = ["sh", "-c", f'{{ {mounts}; }} 2>/dev/null; exec "$@"', "sh", *argv]
        return self._exec_ns(self.hosts[host].name, argv, **popen_kwargs)

    def kill_host(self, host: int) -> None:
        """Lose host ``host`` as a machine is lost: every process in it (its Ray node with
        all its workers) killed at once with SIGKILL, nothing told first; its namespace and
        disk stay."""
        namespace = [self.hosts[host].name]
        deadline = time.monotonic() + 10
        while (pids := _ns_pids(namespace) - {os.getpid()}) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)

    def disk_dir(self, host: int) -> Path:
        """Where host ``host``'s own ``disk`` lives, seen from outside the bed."""
        return Path(f"/tmp/{self.bed}-disk/h{host}")

    def set_rate(self, host: int, rate: str) -> None:
        """Change host `host`'s uplink (egress) rate, effective immediately."""
        _run(*self.rate_argv(host, rate))

    def set_downlink(self, host: int, rate: str) -> None:
        """Shape what host `host` receives to `rate` as well (a slow link is slow both ways):
        its link device's ingress is redirected to an IFB device `ifb0` with a `tbf` root."""
        ns = self.hosts[host].name
        if host not in self._downlinks:
            _run("ip", "-n", ns, "link", "add", "ifb0", "mtu", str(self.mtu), "type", "ifb")
            _run("ip", "-n", ns, "link", "set", "ifb0", "up")
            _run("tc", "-n", ns, "qdisc", "add", "dev", self._dev, "handle", "ffff:", "ingress")
            _run(
                "tc", "-n", ns, "filter", "add", "dev", self._dev, "parent", "ffff:",
                "protocol", "ip", "u32", "match", "u32", "0", "0",
                "action", "mirred", "egress", "redirect", "dev", "ifb0",
            )  # fmt: skip
            self._downlinks.add(host)
        _run("tc", "-n", ns, "qdisc", "replace", "dev", "ifb0", "root", *_tbf(rate, self.mtu))

    def rate_argv(self, host: int, rate: str) -> list[str]:
        """The command `set_rate` runs, for a process that changes the rate itself (root,
        any namespace): e.g. a driver that squeezes a link on its own schedule."""
        return [
            "tc",
            "-n",
            self.hosts[host].name,
            "qdisc",
            "replace",
            "dev",
            self._dev,
            "root",
            *_tbf(rate, self.mtu),
        ]

    @property
    def link_device(self) -> str:
        """Each host's link device: `tun0` with a delay line, `eth0` without."""
        return self._dev

    def _stats(self, host: int) -> dict:
        out = _run("ip", "-n", self.hosts[host].name, "-s", "-j", "link", "show", self._dev)
        return json.loads(out.stdout)[0]["stats64"]

    def tx_bytes(self, host: int) -> int:
        """Bytes host `host` has sent on its link (IP packets; no Ethernet header on tun0)."""
        return int(self._stats(host)["tx"]["bytes"])

    def rx_bytes(self, host: int) -> int:
        """Bytes host `host` has received on its link."""
        return int(self._stats(host)["rx"]["bytes"])

    @property
    def ray_env(self) -> dict[str, str]:
        """What a process needs in its environment to join the bed's Ray (`exec` adds it)."""
        return dict(self._ray_env)

    @property
    def ray_temp_dir(self) -> Path:
        return Path(f"/tmp/{self.bed}-ray")

    def start_ray(
        self,
        num_cpus: int = 2,
        env: dict[str, str] | None = None,
        object_store_memory: int = 256 << 20,
        timeout: float = 90.0,
        resources: list[dict[str, float]] | None = None,
        dashboard: bool = False,
        host_env: list[dict[str, str]] | None = None,
        nodes: int | None = None,
    ) -> str:
        """Start a Ray head in host 0 and a worker node in every other host; wait until all
        are alive and return the GCS address "ip:port". `env` is added to the environment of
        every Ray process. The object store is small by default: every node of every bed on
        this machine shares one /dev/shm. `resources[i]`: custom resources of host i besides
        `host<i>`. `dashboard`: the head runs Ray's dashboard on its own address, port
        DASHBOARD_PORT (`ray job submit`, the state API). `host_env[i]`: host i's own
        variables (its TLS certificate, say), given to its Ray and to what `exec` starts there.
        `nodes`: Ray on the first `nodes` hosts only (default: every host)."""
        address = f"{self.hosts[0].ip}:{RAY_PORT}"
        self._ray_env = {"RAY_AUTH_MODE": (env or {}).get("RAY_AUTH_MODE") or _ray_auth_mode()}
        # RAY_ADDRESS would point `ray start` at some other cluster.
        full_env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        full_env |= self._ray_env | (env or {})
        self._host_env = dict(enumerate(host_env or []))
        ray = shutil.which("ray", path=Path(sys.executable).parent) or shutil.which("ray") or "ray"
        started = self.hosts[: nodes or len(self.hosts)]
        for i, host in enumerate(started):
            temp = self.ray_temp_dir / f"h{i}"
            temp.mkdir(parents=True, exist_ok=True)
            argv = [
                ray,
                "start",
                "--block",
                "--disable-usage-stats",
                "--node-ip-address",
                host.ip,
                "--num-cpus",
                str(num_cpus),
                "--resources",
                json.dumps({host.resource: 100, **((resources or [])[i : i + 1] or [{}])[0]}),
                "--object-store-memory",
                str(object_store_memory),
                "--node-manager-port",
                "6381",
                "--object-manager-port",
                "6382",
                "--min-worker-port",
                "20000",
                "--max-worker-port",
                "20999",
                "--temp-dir",
                str(temp),
            ]
            head = ["--head", "--port", str(RAY_PORT)] + (
                [
                    "--include-dashboard=true",
                    "--dashboard-host",
                    host.ip,
                    "--dashboard-port",
                    str(DASHBOARD_PORT),
                ]
                if dashboard
                else ["--include-dashboard=false"]
            )
            argv += head if i == 0 else ["--address", address]
            host_full_env = full_env | self._host_env.get(i, {})
            with open(self.ray_temp_dir / f"start-h{i}.log", "w") as log:
                self.exec(
                    i, argv, env=host_full_env, stdout=log, stderr=log, stdin=subprocess.DEVNULL
                )
            if i == 0:  # workers retry the GCS for a while, but a running head is quicker
                self._wait_nodes(address, 1, timeout, host_full_env)
        self._wait_nodes(address, len(started), timeout, full_env | self._host_env.get(0, {}))
        return address

    def _wait_nodes(self, address: str, want: int, timeout: float, env: dict[str, str]) -> None:
        argv = [sys.executable, "-c", _WAIT_NODES, address, str(want), str(timeout)]
        waiter = self.exec(
            0, argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        out, _ = waiter.communicate()
        if waiter.returncode != 0:
            logs = "\n".join(
                f"{p.name}: {p.read_text()[-2000:]}"
                for p in sorted(self.ray_temp_dir.glob("start-h*.log"))
            )
            raise RuntimeError(f"Ray did not come up: {out.strip()[-2000:]}\n{logs}")

    # -- tearing down ---------------------------------------------------------------------

    def down(self) -> None:
        """Stop every process of the bed, delete its namespaces (and so its devices) and its
        temp dir. Idempotent, and safe after a partial up()."""
        if not self._owned:
            return  # never up, or already down (the name may belong to a newer bed by now)
        namespaces = _namespaces(rf"{re.escape(self.bed)}-")
        _kill_all(namespaces, self._procs)
        self._procs.clear()
        for ns in namespaces:
            _run("ip", "netns", "del", ns, check=False)
        shutil.rmtree(self.ray_temp_dir, ignore_errors=True)
        shutil.rmtree(f"/tmp/{self.bed}-disk", ignore_errors=True)
        self._ray_env, self._host_env = {}, {}
        self._owned = False

    def __enter__(self) -> Self:
        # A kill (SIGTERM: `timeout`, a CI cancel) unwinds the block like Ctrl-C, so the bed
        # comes down with it. Set here, not once at start: ray.init() in this process puts
        # in a SIGTERM handler of Ray's own, after which a kill skips every `finally`.
        if threading.current_thread() is threading.main_thread():
            self._sigterm = signal.signal(signal.SIGTERM, signal.default_int_handler)
            self._sigterm_set = True
        try:
            return self.up()
        except BaseException:  # no __exit__ follows
            self._restore_sigterm()
            raise

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.down()
        finally:
            self._restore_sigterm()

    def _restore_sigterm(self) -> None:
        if self._sigterm_set:
            signal.signal(signal.SIGTERM, self._sigterm or signal.SIG_DFL)
            self._sigterm_set = False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Multi-host network test bed (see module doc).")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="build a bed and start Ray; Ctrl-C tears it down")
    up.add_argument("--hosts", type=int, default=2)
    up.add_argument("--rate", default="100mbit")
    up.add_argument("--delay-ms", type=float, default=0.0)
    up.add_argument("--mtu", type=int)
    up.add_argument("--prefix", default="vfnb")
    up.add_argument("--num-cpus", type=int, default=2)
    up.add_argument("--no-ray", action="store_true", help="network only")
    down = sub.add_parser("down", help="remove every bed with this prefix (crash leftovers)")
    down.add_argument("--prefix", default="vfnb")
    args = parser.parse_args(argv)

    if args.command == "down":
        removed = cleanup(args.prefix)
        print(f"removed {len(removed)} namespaces: {' '.join(removed) or '-'}")
        return 0
    if reason := available(delay=args.delay_ms > 0):
        print(reason, file=sys.stderr)
        return 1
    # Tear down on Ctrl-C even when started in the background (which ignores SIGINT); the
    # `with` does so on a kill.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with NetBed(args.hosts, args.rate, args.delay_ms, args.mtu, args.prefix) as bed:
        for host in bed.hosts:
            print(f"{host.name}  {host.ip}  resource {host.resource}")
        if not args.no_ray:
            address = bed.start_ray(args.num_cpus)
            env = " ".join(f"{k}={v}" for k, v in bed.ray_env.items())
            print(
                f"ray address {address}\ndriver: {env} ip netns exec {bed.hosts[0].name} "
                f"python driver.py  # ray.init(address={address!r})"
            )
        print("up; Ctrl-C tears down", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
