"""Who leads, for the client-facing side of a node on etcd: the cluster view as a `LeaderProvider`.

Theory of operation: `ViewLeader` answers `server/proxy.py`'s `LeaderProvider` questions from
the `ClusterNode`'s view of etcd (the leader key, and each node's record with its advertised
host and client ports). Its answer is a value computed from the view; `refresh()` recomputes it
and tells the subscribers (the `ProxyGate`, which closes every relay to the old leader) only
when it changed. The cluster member calls `refresh()` at each role change and each step of its
loop, so a leader whose record etcd shows a moment after its leader key is picked up then.

"None" means nobody else leads: this node leads, or nobody is known to lead (between a lease's
expiry and the next election, or before the leader's record is read). A follower's gate then
closes client connections instead of serving them (`ProxyGate(..., serve_unled=False)`): its
broker is an empty stand-in, not the cluster's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ringmq.cluster.agent import ClusterNode
from ringmq.cluster.view import ClusterView, NodeView
from ringmq.server.proxy import LeaderAddresses, LeaderListener

__all__ = ["ViewLeader", "node_addresses"]


def node_addresses(node: NodeView) -> LeaderAddresses | None:
    """Where `node` serves clients: the host of its advertised cluster address and its client
    ports (None: its record is not known)."""
    if node.address is None:
        return None
    host = node.address.rpartition(":")[0].strip("[]")
    if not host:
        return None
    return LeaderAddresses(
        node.name,
        host,
        node.amqp_port,
        node.stomp_port,
        node.mqtt_port,
        node.http_port,
        node.stream_port,
        node.web_stomp_port,
        node.web_mqtt_port,
        node.web_amqp_port,
    )


class ViewLeader:
    """A `LeaderProvider` over a `ClusterNode` (see the module docstring)."""

    def __init__(self, cluster: ClusterNode) -> None:
        self.cluster = cluster
        self._leader: LeaderAddresses | None = None
        self._listeners: list[LeaderListener] = []

    def leader(self) -> LeaderAddresses | None:
        return self._leader

    def nodes(self) -> Sequence[LeaderAddresses]:
        found = (node_addresses(n) for n in self.cluster.view().nodes)
        return [a for a in found if a is not None]

    def subscribe(self, callback: LeaderListener) -> Callable[[], None]:
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    def refresh(self) -> None:
        """Read the view again; tell every subscriber if the leader's addresses changed."""
        leader = _other_leader(self.cluster.view())
        if leader == self._leader:
            return
        self._leader = leader
        for callback in list(self._listeners):
            callback(leader)

    def peer_hosts(self) -> frozenset[str]:
        """The hosts of every node (whose PROXY headers a leader believes)."""
        return frozenset(a.host for a in self.nodes())


def _other_leader(view: ClusterView) -> LeaderAddresses | None:
    if view.leader is None or view.leader == view.node:
        return None
    for n in view.nodes:
        if n.name == view.leader:
            return node_addresses(n)
    return None
