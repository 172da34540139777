"""What a cluster node reports: plain records for management, the CLI and role listeners."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

__all__ = ["ClusterView", "NodeView", "RoleChange", "RoleListener"]


@dataclass(frozen=True, slots=True)
class RoleChange:
    """This node's role for its shard changed (or the leader it follows did).

    `role` is "leader" or "follower"; `leader` the leading node's name and `leader_address` its
    advertised cluster address (None while nobody leads as far as this node knows). A change to
    "follower" from "leader" is the fence: stop confirming at once.
    """

    role: str
    epoch: int
    leader: str | None
    leader_address: str | None
    shard: int = 0


RoleListener: TypeAlias = Callable[[RoleChange], None]
"""Called on the event loop, synchronously, at each `RoleChange` (it must not block)."""


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node as etcd shows it (`/api/nodes` adds the local node's own figures)."""

    name: str
    role: str
    running: bool
    """Registered in etcd (its lease is alive)."""
    epoch: int
    in_sync: bool
    address: str | None = None
    amqp_port: int | None = None
    http_port: int | None = None
    stomp_port: int | None = None
    mqtt_port: int | None = None
    stream_port: int | None = None
    web_stomp_port: int | None = None
    web_mqtt_port: int | None = None
    web_amqp_port: int | None = None


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The cluster as this node last read it from etcd."""

    cluster: str
    shard: int
    node: str
    role: str
    epoch: int
    leader: str | None
    isr: tuple[str, ...]
    nodes: tuple[NodeView, ...]
    etcd_ok: bool
    """The last read of etcd succeeded."""
    lease_ttl_s: int
