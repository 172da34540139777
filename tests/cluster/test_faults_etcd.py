"""Three etcd members under three replicated nodes: one lost, then quorum lost (`-m cluster`).

Losing one etcd member (etcd's own Raft leader, the worst one) keeps the cluster serving:
confirms go on. Losing a second (no quorum): no lease can be renewed, the leader fences itself
and nothing is confirmed until etcd has a quorum again; then a leader of a newer epoch serves
every message confirmed before. Waits are bounded against hanging, never timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.cluster.conftest import EtcdCluster, Node
from tests.cluster.faults import Amqp091, check, declare, drain, leader_of
from tests.cluster.test_election_etcd import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(300)]

ISR_TIMEOUT = "isr_timeout_ms = 1500\n"


def test_etcd_losing_one_member_keeps_serving_and_losing_quorum_stops_confirms(
    etcd_cluster: Callable[..., EtcdCluster], start_node: Callable[..., Node]
) -> None:
    etcd = etcd_cluster(3)
    nodes = [start_node(n, etcd.endpoints, extra_config=ISR_TIMEOUT) for n in ("n1", "n2", "n3")]
    leader = wait_for("one leader", lambda: leader_of(nodes))
    wait_for("three in sync", lambda: len(leader.cluster()["isr"]) == 3)
    epoch = leader.cluster()["epoch"]
    declare(leader)
    pub = Amqp091(name_="p", nodes=lambda: list(nodes), deadline_s=240.0)
    pub.start()
    try:
        pub.wait_confirms(50)
        first = etcd.leader()
        first.kill()  # etcd's own leader: the others elect another one
        lost_at = time.monotonic()
        pub.wait_confirms(100)
        print(f"one etcd member lost: 100 confirmed {time.monotonic() - lost_at:.2f} s after")
        second = next(m for m in etcd.members if m is not first)
        second.kill()  # no quorum: no renewal succeeds

        def all_fenced() -> bool:
            views = [n.cluster() for n in nodes]
            return all(v["role"] == "follower" and not v["etcd_ok"] for v in views)

        wait_for("every node fenced, etcd unavailable", all_fenced)
        fenced_at = time.monotonic()
        fenced = len(pub.confirmed)
        # nothing sent from now on is confirmed while nobody can hold a lease: watch the
        # nodes a while (each asked several times) before etcd comes back
        for _ in range(10):
            assert all_fenced()
        back_at = time.monotonic()
        first.restart()
        second.restart()
        etcd.wait_healthy()
        leader = wait_for("a leader again", lambda: leader_of(nodes))
        assert leader.cluster()["epoch"] > epoch
        pub.wait_confirms(50)
        during = [
            c
            for s, c in zip(pub.sent_at, pub.confirmed_at, strict=True)
            if fenced_at < s and c < back_at
        ]
        assert not during, f"{len(during)} confirms while etcd had no quorum"
        print(f"quorum back: {len(pub.confirmed) - fenced} more confirmed on {leader.name}")
    finally:
        pub.stop()
        pub.join(timeout=60)
    check([pub], drain(leader))
