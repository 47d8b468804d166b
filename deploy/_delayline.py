"""The bed's delay line: a constant one-way delay between TUN devices (this kernel has no netem).

    python deploy/_delayline.py --delay-ms 5 NETNS=IP [NETNS=IP ...]

For every NETNS=IP it attaches to the persistent TUN device `tun0` that `netbed.py` created
in that namespace (IFF_TUN|IFF_NO_PI: raw IPv4 packets, no GSO). It reads every packet any
host sends, holds it `delay_ms` and writes it to the TUN of the host owning the destination
address; anything else (IPv6, broadcast, unknown hosts) is dropped, as a router would.

The delay is the same for every packet, so one FIFO queue is already sorted by due time.
One thread, non-blocking fds, `selectors`: ~5% of a core at 100 Mbit, ~15% at 1 Gbit
(9000-byte MTU, as measured on a 2-core VM).

It prints "ready" once attached, and exits when stdin reaches EOF, so it can never outlive
the bed that started it (that bed holds the other end of the pipe), even after a SIGKILL.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import fcntl
import os
import selectors
import socket
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
CLONE_NEWNET = 0x40000000
TUN_NAME = b"tun0"

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    # Python 3.11 has no os.setns.
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def attach(netns: str) -> int:
    """Open `tun0` of `netns`: TUNSETIFF looks the name up in the caller's network namespace,
    so step into that namespace for the ioctl and back out; the fd stays bound to the device."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
            fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", TUN_NAME, IFF_TUN | IFF_NO_PI))
        finally:
            _setns(home)
    finally:
        os.close(target)  # holding it would keep the namespace alive after `ip netns del`
        os.close(home)
    return fd


def run(delay_s: float, hosts: list[tuple[str, str]]) -> None:
    route: dict[bytes, int] = {}
    sel = selectors.DefaultSelector()
    for netns, ip in hosts:
        fd = attach(netns)
        route[socket.inet_aton(ip)] = fd
        sel.register(fd, selectors.EVENT_READ)
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ)
    queue: collections.deque[tuple[float, int, bytes]] = collections.deque()
    print("ready", flush=True)

    while True:
        timeout = max(0.0, queue[0][0] - time.monotonic()) if queue else None
        for key, _ in sel.select(timeout):
            if key.fd == sys.stdin.fileno():
                if not os.read(key.fd, 4096):
                    return  # the bed is gone
                continue
            due = time.monotonic() + delay_s
            for _ in range(256):  # drain a burst per wake-up, but don't starve the writes
                try:
                    pkt = os.read(key.fd, 65536)
                except BlockingIOError:
                    break
                if len(pkt) >= 20 and pkt[0] >> 4 == 4:
                    dst = route.get(pkt[16:20])
                    if dst is not None:
                        queue.append((due, dst, pkt))
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, dst, pkt = queue.popleft()
            try:
                os.write(dst, pkt)
            except OSError:
                pass  # a full or vanished device drops the packet, like a real link


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-ms", type=float, required=True)
    parser.add_argument("hosts", nargs="+", metavar="NETNS=IP")
    args = parser.parse_args(argv)
    run(args.delay_ms / 1000.0, [tuple(h.split("=", 1)) for h in args.hosts])


if __name__ == "__main__":
    main()
