"""The cluster view as the client side's `LeaderProvider`: who leads, and a change told once."""

from __future__ import annotations

from typing import Any, cast

from ringmq.cluster.agent import ClusterNode
from ringmq.cluster.view import ClusterView, NodeView
from ringmq.server.clusterleader import ViewLeader, node_addresses
from ringmq.server.proxy import LeaderAddresses


def _node(name: str, host: str, **ports: Any) -> NodeView:
    return NodeView(name, "follower", True, 3, True, address=f"{host}:5679", **ports)


class _Cluster:
    def __init__(self) -> None:
        self.leader: str | None = None
        self.nodes = (
            _node("n1", "10.0.0.1", amqp_port=5672, http_port=15672, stomp_port=61613),
            _node("n2", "10.0.0.2", amqp_port=5673, mqtt_port=1883),
            NodeView("n3", "follower", False, 3, False),  # no record read yet
        )

    def view(self) -> ClusterView:
        return ClusterView("c", 0, "n2", "follower", 3, self.leader, (), self.nodes, True, 5)


def _provider() -> tuple[ViewLeader, _Cluster, list[LeaderAddresses | None]]:
    cluster = _Cluster()
    provider = ViewLeader(cast("ClusterNode", cluster))
    told: list[LeaderAddresses | None] = []
    provider.subscribe(told.append)
    return provider, cluster, told


def test_another_node_leading_is_named_with_its_client_ports() -> None:
    provider, cluster, told = _provider()
    cluster.leader = "n1"
    provider.refresh()
    want = LeaderAddresses("n1", "10.0.0.1", 5672, 61613, None, 15672)
    assert provider.leader() == want
    assert told == [want]
    provider.refresh()  # nothing changed: nobody is told again
    assert told == [want]


def test_this_node_leading_or_nobody_is_none_and_a_change_is_told() -> None:
    provider, cluster, told = _provider()
    cluster.leader = "n1"
    provider.refresh()
    cluster.leader = "n2"  # this node
    provider.refresh()
    assert provider.leader() is None
    cluster.leader = "n3"  # leads, but its record is not read yet
    provider.refresh()
    assert provider.leader() is None
    assert [t.node if t else None for t in told] == ["n1", None]


def test_nodes_and_peer_hosts_list_the_nodes_with_a_record() -> None:
    provider, _cluster, _told = _provider()
    assert [n.node for n in provider.nodes()] == ["n1", "n2"]
    assert provider.peer_hosts() == frozenset({"10.0.0.1", "10.0.0.2"})
    six = NodeView("n4", "follower", True, 1, True, address="[fd00::4]:5679", amqp_port=5672)
    got = node_addresses(six)
    assert got is not None
    assert got.host == "fd00::4"
