"""Network partitions with real network namespaces (`-m cluster`, root only).

Each `ringmq serve` node runs in its own namespace on a bridge (tests/cluster/netns.py); etcd
and the test's clients stay in the root namespace. Skipped, with the reason, without root.

1. The leader loses etcd alone (a blackhole route to etcd's address in its namespace): its
   followers and its clients still reach it. It cannot renew its lease, so it must stop
   confirming at its fence, before etcd expires the lease and another node leads in a newer
   epoch: two leaders never confirm in one epoch. The checker sees every message any leader
   confirmed in the surviving log.
2. The leader is cut off entirely (its veth down: no FIN, no RST): a new leader is elected,
   the publisher finds it; the old leader, healed, rejoins as a follower of the newer epoch
   and is back in the ISR.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import httpx
import pytest

from tests.cluster.conftest import EtcdCluster, Node
from tests.cluster.faults import Amqp091, check, declare, drain, leader_of
from tests.cluster.netns import Network
from tests.cluster.test_election_etcd import wait_for
from tests.cluster.test_faults_kill import etcd_isr

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

ISR_TIMEOUT = "isr_timeout_ms = 1500\n"


def role(node: Node) -> tuple[str, int] | None:
    """(role, epoch) as the node says, or None when it cannot be asked."""
    try:
        v = node.cluster()
    except (httpx.HTTPError, AssertionError):
        return None
    return v["role"], v["epoch"]


def follows(node: Node) -> bool:
    r = role(node)
    return r is not None and r[0] == "follower"


def in_isr(etcd: EtcdCluster, name: str) -> bool:
    return name in etcd_isr(etcd)


def new_leader(nodes: list[Node], epoch: int) -> Node | None:
    """The one reachable node that leads in an epoch after `epoch`."""
    found = [n for n in nodes if (r := role(n)) is not None and r[0] == "leader" and r[1] > epoch]
    return found[0] if len(found) == 1 else None


def start_in_namespaces(
    network: Network,
    etcd_cluster: Callable[..., EtcdCluster],
    start_node: Callable[..., Node],
) -> tuple[EtcdCluster, list[Node]]:
    etcd = etcd_cluster(1, host=network.etcd_ip)
    nodes = []
    for name in ("n1", "n2", "n3"):
        host, wrap = network.add(name)
        nodes.append(
            start_node(name, etcd.endpoints, extra_config=ISR_TIMEOUT, host=host, wrap=wrap)
        )
    wait_for("one leader", lambda: leader_of(nodes))
    wait_for("three in sync", lambda: len(etcd_isr(etcd)) == 3)
    return etcd, nodes


def test_partitions_fence_the_old_leader_and_it_rejoins_as_a_follower(
    network: Network,
    etcd_cluster: Callable[..., EtcdCluster],
    start_node: Callable[..., Node],
) -> None:
    etcd, nodes = start_in_namespaces(network, etcd_cluster, start_node)
    leader = wait_for("one leader", lambda: leader_of(nodes))
    declare(leader)
    pub = Amqp091(name_="p", nodes=lambda: list(nodes), deadline_s=240.0)
    pub.start()
    try:
        pub.wait_confirms(50)
        for cut in (network.cut_etcd, network.cut):
            old = leader
            epoch = old.cluster()["epoch"]
            cut_at = time.monotonic()
            cut(old.name)
            if cut == network.cut_etcd:
                # still reachable: it must say it no longer leads (fenced), whatever else
                wait_for("the cut-off leader fenced", functools.partial(follows, old))
                print(f"{old.name} fenced itself {time.monotonic() - cut_at:.2f} s after the cut")
            others = [n for n in nodes if n is not old]
            leader = wait_for("a new leader", functools.partial(new_leader, others, epoch))
            print(
                f"{cut.__name__} {old.name}: {leader.name} leads after "
                f"{time.monotonic() - cut_at:.2f} s"
            )
            pub.wait_confirms(30)  # the publisher found the new leader
            print(f"publisher confirming again {time.monotonic() - cut_at:.2f} s after the cut")
            network.heal(old.name)
            # the old leader rejoins as a follower of the newer epoch and is back in the ISR
            wait_for("the old leader follows", functools.partial(follows, old))
            wait_for("back in the ISR", functools.partial(in_isr, etcd, old.name))
            assert leader.cluster()["role"] == "leader"
            pub.wait_confirms(30)
    finally:
        pub.stop()
        pub.join(timeout=60)
    check([pub], drain(leader))
