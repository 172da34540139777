"""Ports for servers a test must start on a port it names in advance.

A server that restarts on the same port (a cluster node at a role change, a broker after kill -9,
slapd, a RabbitMQ node) cannot take port 0. Asking the kernel for a free port and closing it
races every later bind(0) and every outgoing connection on the machine: the kernel hands out
the same ephemeral range again, and a client socket of another test (or of etcd) may hold the
port by the time the server binds it.

So these ports come from just below the kernel's ephemeral range, which the kernel never
chooses on its own; each is tried with a bind before it is handed out, and this process never
hands one out twice. The start in that range depends on the process id, so two suites on one
machine rarely meet.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

_SPAN = 10_000
_given: set[int] = set()


def _range() -> tuple[int, int]:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    top = low - 1
    bottom = max(1025, low - _SPAN)
    if top - bottom < 1000:  # an ephemeral range that starts low: use the ports above it instead
        bottom, top = 61000, 64999
    return bottom, top


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int) -> list[int]:
    """`n` distinct ports on 127.0.0.1 that no one holds now and the kernel will not lend out."""
    bottom, top = _range()
    width = top - bottom + 1
    start = (os.getpid() * 7919 + len(_given)) % width
    ports: list[int] = []
    for step in range(width):
        port = bottom + (start + step) % width
        if port in _given or not _bindable(port):
            continue
        _given.add(port)
        ports.append(port)
        if len(ports) == n:
            return ports
    raise RuntimeError(f"no {n} free ports left in {bottom}-{top}")


def free_port() -> int:
    return free_ports(1)[0]
