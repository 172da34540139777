"""A cluster leader's server serves the shard link's owner side (`ringmq.node.leader_server`),
with the configured shard index in its `Welcome`; a follower's empty broker does not.

The leader's server runs on its own loop thread over loopback with stand-ins for the cluster
view (what `leader_server` reads of it: the nodes' hosts, for PROXY headers and AMQP 1.0's
failover list); an `OriginSession` over a real socket plays the origin shard.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

import pytest

from ringmq.cluster.agent import ClusterNode
from ringmq.node import follower_server, leader_server
from ringmq.server.clusterleader import ViewLeader
from ringmq.server.options import ServerOptions
from ringmq.server.proxy import LeaderAddresses, LeaderListener
from ringmq.server.thread import ServerThread
from ringmq.shardlink.origin import Event, Opened, OriginSession

SECRET = b"leader-link"


class NoOtherLeader:
    """The `ViewLeader` of a node that leads alone."""

    def leader(self) -> LeaderAddresses | None:
        return None

    def nodes(self) -> Sequence[LeaderAddresses]:
        return []

    def subscribe(self, callback: LeaderListener) -> Callable[[], None]:
        return lambda: None

    def peer_hosts(self) -> frozenset[str]:
        return frozenset()


def _options(tmp_path: Path) -> ServerOptions:
    return ServerOptions(
        host="127.0.0.1",
        amqp_port=0,
        http_port=None,
        data_dir=tmp_path,
        shard_link_port=0,
        shard_link_secret=SECRET,
        shard_index=4,
    )


def test_a_leaders_server_welcomes_shard_links_with_its_shard_index(tmp_path: Path) -> None:
    leader = cast(ViewLeader, NoOtherLeader())
    srv = leader_server(_options(tmp_path), cast(ClusterNode, None), leader)
    thread = ServerThread(srv)
    thread.start()
    try:
        origin = OriginSession(1, SECRET)
        events: list[Event] = []
        with socket.create_connection(("127.0.0.1", thread.port_of("shard-link")), 10) as sock:
            sock.sendall(origin.data_to_send())
            while not events:
                data = sock.recv(65536)
                assert data, "the leader closed the link"
                events += origin.receive_data(data)
        assert events == [Opened(4)]
    finally:
        thread.stop()


def test_a_followers_server_has_no_shard_link(tmp_path: Path) -> None:
    leader = cast(ViewLeader, NoOtherLeader())
    srv = follower_server(_options(tmp_path), cast(ClusterNode, None), leader)
    assert "shard-link" not in srv.handler_factories
    with pytest.raises(LookupError):
        srv.port_of("shard-link")
