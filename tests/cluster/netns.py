"""Network namespaces for partition tests: one per ringmq node, joined by a bridge (as root).

Layout (10.231.X.0/24, X from the test process id so that two runs do not meet):

    root namespace: bridge rqb<tag>  10.231.X.1 (the test's clients)  10.231.X.2 (etcd)
      |- veth rqh<tag><i>  ==  rqn<tag><i> in namespace rq<tag><name>: 10.231.X.(10+i)

`cut(name)` sets the node's bridge-side veth down: the node reaches nobody and nobody reaches
it (as a pulled cable: no FIN, no RST). `cut_etcd(name)` adds a blackhole route to etcd's
address inside the node's namespace: the node loses etcd alone, its followers and clients
still reach it. `heal(name)` undoes both. No iptables. `close()` deletes every namespace and
the bridge (the veth pairs go with their namespace); the fixture calls it even on failure.
"""

from __future__ import annotations

import contextlib
import os
import subprocess

import pytest


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def available() -> str | None:
    """None when `ip netns add` works here; otherwise why not (the reason to skip)."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    probe = f"rqprobe{os.getpid() % 100000}"
    try:
        _ip("netns", "add", probe)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"ip netns add does not work here: {exc}"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        _ip("netns", "del", probe)
    return None


class Network:
    """A bridge and one namespace per node (see the module docstring)."""

    def __init__(self) -> None:
        reason = available()
        if reason is not None:
            pytest.skip(reason)
        pid = os.getpid()
        self.tag = f"{pid % 10000}"
        self.subnet = f"10.231.{pid % 250}"
        self.bridge = f"rqb{self.tag}"
        self.client_ip = f"{self.subnet}.1"
        self.etcd_ip = f"{self.subnet}.2"
        self.namespaces: dict[str, str] = {}
        self.index: dict[str, int] = {}
        self._blackholed: set[str] = set()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.client_ip}/24", "dev", self.bridge)
        _ip("addr", "add", f"{self.etcd_ip}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def add(self, name: str) -> tuple[str, tuple[str, ...]]:
        """A namespace for node `name`: its address and the command prefix to run in it."""
        i = len(self.namespaces) + 1
        ns = f"rq{self.tag}{name}"
        host, peer = f"rqh{self.tag}{i}", f"rqn{self.tag}{i}"
        self.namespaces[name] = ns
        self.index[name] = i
        _ip("netns", "add", ns)
        _ip("link", "add", host, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", ns)
        _ip("link", "set", host, "master", self.bridge)
        _ip("link", "set", host, "up")
        address = f"{self.subnet}.{10 + i}"
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", peer)
        _ip("-n", ns, "link", "set", peer, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        return address, ("ip", "netns", "exec", ns)

    def cut(self, name: str) -> None:
        _ip("link", "set", f"rqh{self.tag}{self.index[name]}", "down")

    def cut_etcd(self, name: str) -> None:
        _ip("-n", self.namespaces[name], "route", "add", "blackhole", f"{self.etcd_ip}/32")
        self._blackholed.add(name)

    def heal(self, name: str) -> None:
        _ip("link", "set", f"rqh{self.tag}{self.index[name]}", "up")
        if name in self._blackholed:
            _ip("-n", self.namespaces[name], "route", "del", "blackhole", f"{self.etcd_ip}/32")
            self._blackholed.discard(name)

    def close(self) -> None:
        for name, ns in self.namespaces.items():
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                _ip("netns", "del", ns)
            # a process still in the namespace keeps it (and the pair) alive: delete our end
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                _ip("link", "del", f"rqh{self.tag}{self.index[name]}")
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            _ip("link", "del", self.bridge)
