"""A clean stop (SIGTERM) of a cluster node (`-m cluster`).

A leader's clean stop is a planned step-down: its ISR followers catch up, it stops confirming,
gives up the leader key, waits until one of them leads, and only then closes its clients and
exits. A follower's clean stop revokes its lease, so the leader drops it from the ISR at once
rather than after `isr_timeout_ms`. Four publishers (pika, qpid-proton, stomp.py, paho-mqtt;
tests/cluster/faults.py) run throughout; the checker drains the last leader. What is asserted
is what the brokers record (the stopping leader's hand-over line, etcd's ISR, the leader's
log), never a time.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

import pytest

from tests.cluster.conftest import EtcdCluster, Node
from tests.cluster.faults import PROTOCOLS, Publisher, check, declare, drain
from tests.cluster.test_election_etcd import one_leader, wait_for
from tests.cluster.test_faults_kill import etcd_isr

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

_HANDED = re.compile(r"cluster: (\S+) stopped: handed over epoch (\d+); (\S+) leads epoch (\d+)")


def start_three(
    etcd_cluster: Callable[[int], EtcdCluster],
    start_node: Callable[..., Node],
    isr_timeout_ms: int,
) -> tuple[EtcdCluster, list[Node], Node]:
    etcd = etcd_cluster(1)
    config = f"isr_timeout_ms = {isr_timeout_ms}\n"
    nodes = [
        start_node(n, etcd.endpoints, extra_config=config, protocols=True)
        for n in ("n1", "n2", "n3")
    ]
    name, _ = wait_for("one leader", lambda: one_leader(nodes))
    wait_for("three in sync", lambda: len(nodes[0].cluster()["isr"]) == 3)
    leader = next(n for n in nodes if n.name == name)
    declare(leader)
    return etcd, nodes, leader


def publishers(nodes: list[Node]) -> list[Publisher]:
    running = lambda: [n for n in nodes if n.running()]  # noqa: E731
    pubs: list[Publisher] = [
        cls(name_=proto, nodes=running, deadline_s=200.0) for proto, cls in PROTOCOLS.items()
    ]
    for p in pubs:
        p.start()
    for p in pubs:
        p.wait_confirms(20)
    return pubs


def stop_all(pubs: list[Publisher]) -> None:
    for p in pubs:
        p.stop()
    for p in pubs:
        p.join(timeout=60)


def test_sigterm_of_the_leader_hands_over_and_loses_no_confirmed_message(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    _etcd, nodes, leader = start_three(etcd_cluster, start_node, isr_timeout_ms=1500)
    epoch = leader.cluster()["epoch"]
    followers = {n.name for n in nodes if n is not leader}
    pubs = publishers(nodes)
    try:
        leader.stop()  # SIGTERM, and wait until the process has exited
        assert leader.proc.returncode == 0
        running = [n for n in nodes if n.running()]
        name, new_epoch = wait_for("a new leader", lambda: one_leader(running))
        for p in pubs:  # every publisher confirms again, on the new leader
            p.wait_confirms(10)
    finally:
        stop_all(pubs)
    log = leader.log_path.read_text(errors="replace")
    handed = _HANDED.search(log)
    # the stopping leader handed over, and saw its successor lead before it exited: the
    # successor was elected when the leader key was given up, not when a lease expired
    assert handed is not None, log[-3000:]
    print(handed.group(0), f"(now {name} leads epoch {new_epoch})")
    stopped, given_up, successor, successor_epoch = handed.groups()
    assert (stopped, given_up) == (leader.name, str(epoch))
    assert successor in followers
    # the hand-over's election, or a later one when a winner gave its epoch straight back (a
    # campaign from an ISR read gone stale, or whose answer was lost under load): nobody led
    # in between
    assert int(successor_epoch) > epoch
    for between in range(epoch + 1, int(successor_epoch)):
        for n in nodes:
            text = n.log_path.read_text(errors="replace")
            assert not re.search(rf"leads shard \d+ in epoch {between}\b", text), (n.name, between)
    if int(successor_epoch) > epoch + 1:
        print("epochs given back:", list(range(epoch + 1, int(successor_epoch))))
    # the hand-over's report: the successor had acknowledged the log's end (so every confirm)
    line = next(ln for ln in log.splitlines() if f"{leader.name} hands over: " in ln)
    report = ast.literal_eval(line.split(" hands over: ", 1)[1])
    print("hand-over:", report)
    assert successor in report["caught_up"], report
    check(pubs, drain(next(n for n in nodes if n.name == name)))


def test_sigterm_of_a_follower_leaves_the_isr_without_waiting_for_the_deadline(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    # a deadline longer than this test's bounds: only the clean leave can shrink the ISR
    etcd, nodes, leader = start_three(etcd_cluster, start_node, isr_timeout_ms=600_000)
    pubs = publishers(nodes)
    try:
        follower = next(n for n in nodes if n is not leader)
        assert follower.name in etcd_isr(etcd)
        follower.stop()
        assert follower.proc.returncode == 0
        wait_for("the ISR without it", lambda: follower.name not in etcd_isr(etcd))
        for p in pubs:  # confirms go on without it
            p.wait_confirms(10)
        assert leader.cluster()["leader"] == leader.name  # no election
    finally:
        stop_all(pubs)
    log = leader.log_path.read_text(errors="replace")
    assert f"{follower.name} left the cluster: out of the ISR" in log
    check(pubs, drain(leader))
