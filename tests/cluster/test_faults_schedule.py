"""A randomized fault schedule under confirmed publishing in four protocols (`-m "cluster and
slow"`).

A seeded generator (`RINGMQ_FAULT_SEED` to replay one; the seed is printed) picks 12 faults
among: kill -9 of the leader, kill -9 of a follower, a planned step-down, and, as root (network
namespaces), cutting the leader off entirely or from etcd alone. Each fault is injected after
a random pause while four publishers (tests/cluster/faults.py) publish with confirms; the
schedule waits for the cluster to serve again (a leader, every publisher confirming), then
restarts or heals what it broke and waits for three nodes in the ISR before the next fault.
The whole run is bounded (12 faults, about 3 minutes; the timeout stops a hang).

Checker: every confirmed message is delivered at least once, none appears that was never
published, first deliveries keep each publisher's order; duplicates are reported.
"""

from __future__ import annotations

import functools
import os
import random
import time
from collections.abc import Callable

import httpx
import pytest

from tests.cluster import netns
from tests.cluster.conftest import EtcdCluster, Node
from tests.cluster.faults import PROTOCOLS, Publisher, check, declare, drain, leader_of
from tests.cluster.test_election_etcd import one_leader, wait_for
from tests.cluster.test_faults_kill import etcd_isr

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(600)]

FAULTS = 12
ISR_TIMEOUT = "isr_timeout_ms = 1500\n"


def test_a_random_fault_schedule_loses_no_confirmed_message(
    etcd_cluster: Callable[..., EtcdCluster], start_node: Callable[..., Node]
) -> None:
    seed = int(os.environ.get("RINGMQ_FAULT_SEED") or random.randrange(1 << 32))
    print(f"RINGMQ_FAULT_SEED={seed}")
    rng = random.Random(seed)
    why_not = netns.available()
    network = netns.Network() if why_not is None else None
    kinds = ["kill-leader", "kill-follower", "step-down"]
    if network is not None:
        kinds += ["cut-leader", "cut-leader-etcd"]
    else:
        print(f"no partitions: {why_not}")
    nodes: list[Node] = []
    try:
        etcd = etcd_cluster(1, host=network.etcd_ip if network else "127.0.0.1")
        for name in ("n1", "n2", "n3"):
            kw: dict[str, object] = {}
            if network is not None:
                kw["host"], kw["wrap"] = network.add(name)
            nodes.append(
                start_node(name, etcd.endpoints, extra_config=ISR_TIMEOUT, protocols=True, **kw)
            )
        leader = wait_for("one leader", lambda: leader_of(nodes))
        wait_for("settled", functools.partial(_settled, nodes, etcd))
        declare(leader)
        pubs: list[Publisher] = [
            cls(name_=proto, nodes=lambda: list(nodes), deadline_s=500.0)
            for proto, cls in PROTOCOLS.items()
        ]
        for p in pubs:
            p.start()
        done: list[str] = []
        try:
            for p in pubs:
                p.wait_confirms(10)
            for i in range(FAULTS):
                kind = rng.choice(kinds)
                time.sleep(rng.uniform(0.0, 2.0))  # the fault lands at a random point
                leader = wait_for("a leader", lambda: leader_of(nodes))
                epoch = leader.cluster()["epoch"]
                at = time.monotonic()
                print(f"fault {i + 1}: {kind} (leader {leader.name}, epoch {epoch})")
                broken: Node | None = None
                if kind == "kill-leader":
                    broken = leader
                    leader.kill()
                elif kind == "kill-follower":
                    broken = rng.choice([n for n in nodes if n is not leader])
                    broken.kill()
                elif kind == "step-down":
                    httpx.post(
                        f"http://{leader.host}:{leader.http_port}/api/cluster/step-down",
                        auth=(leader.user, leader.password),
                        timeout=10,
                    ).raise_for_status()
                elif kind == "cut-leader":
                    assert network is not None
                    network.cut(leader.name)
                else:
                    assert network is not None
                    network.cut_etcd(leader.name)
                if kind != "kill-follower":
                    wait_for("a newer leader", functools.partial(_leads_after, nodes, epoch))
                for p in pubs:
                    p.wait_confirms(5, timeout_s=90)
                took = time.monotonic() - at
                done.append(f"{kind} ({took:.1f} s)")
                print(f"fault {i + 1}/{FAULTS}: {kind}, all four confirming after {took:.2f} s")
                # restore: restart the killed node, heal the cut one; three in the ISR again
                if broken is not None:
                    nodes[nodes.index(broken)] = start_node(**broken.spec)
                if network is not None and kind.startswith("cut"):
                    network.heal(leader.name)
                wait_for("settled again", functools.partial(_settled, nodes, etcd), 90)
        finally:
            for p in pubs:
                p.stop()
            for p in pubs:
                p.join(timeout=60)
        print("schedule:", "; ".join(done))
        final = wait_for("a leader", lambda: leader_of(nodes))
        check(pubs, drain(final))
    finally:
        if network is not None:
            for n in nodes:
                n.kill()
            network.close()


def _settled(nodes: list[Node], etcd: EtcdCluster) -> bool:
    """One leader every node agrees on, and three nodes in the ISR in etcd."""
    return one_leader(nodes) is not None and len(etcd_isr(etcd)) == 3


def _leads_after(nodes: list[Node], epoch: int) -> bool:
    node = leader_of(nodes)
    if node is None:
        return False
    try:
        e: int = node.cluster()["epoch"]
    except (httpx.HTTPError, AssertionError):
        return False
    return e > epoch
