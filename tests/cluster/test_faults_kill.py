"""kill -9 under confirmed publishing in four protocols (`-m cluster`).

Three `ringmq serve` nodes on one etcd; four publishers (pika confirms, qpid-proton settled
transfers, stomp.py receipts, paho-mqtt QoS 1) follow the leader (tests/cluster/faults.py).
The checker drains the last leader: no confirmed message lost, none that was never published,
first deliveries in each publisher's order; duplicates and failover times are printed, not
asserted. Waits are bounded against hanging, never timed.
"""

from __future__ import annotations

import base64
import functools
import json
import threading
import time
from collections.abc import Callable

import httpx
import pika
import pytest

from tests.cluster.conftest import LEASE_TTL_S, EtcdCluster, Node
from tests.cluster.faults import (
    PROTOCOLS,
    QUEUE,
    Amqp091,
    DelayProxy,
    Publisher,
    check,
    declare,
    drain,
)
from tests.cluster.test_election_etcd import one_leader, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

ISR_TIMEOUT = "isr_timeout_ms = 1500\n"
ISR_KEY = "/ringmq/test/shards/0/isr"  # conftest's nodes run cluster "test", shard 0


def start_three(
    etcd_cluster: Callable[[int], EtcdCluster],
    start_node: Callable[..., Node],
    endpoints: Callable[[EtcdCluster], str] = lambda etcd: etcd.endpoints,
    ttl_s: int = LEASE_TTL_S,
) -> tuple[EtcdCluster, list[Node], Node]:
    etcd = etcd_cluster(1)
    nodes = [
        start_node(n, endpoints(etcd), extra_config=ISR_TIMEOUT, protocols=True, ttl_s=ttl_s)
        for n in ("n1", "n2", "n3")
    ]
    name, _ = wait_for("one leader", lambda: one_leader(nodes))
    wait_for("three in sync", lambda: len(nodes[0].cluster()["isr"]) == 3)
    leader = next(n for n in nodes if n.name == name)
    declare(leader)
    return etcd, nodes, leader


def etcd_isr(etcd: EtcdCluster) -> list[str]:
    """The ISR as etcd holds it now (a linearizable read, not a node's view)."""
    key = base64.b64encode(ISR_KEY.encode()).decode()
    r = httpx.post(f"{etcd.members[0].url}/v3/kv/range", json={"key": key}, timeout=5)
    r.raise_for_status()
    kvs = r.json().get("kvs", [])
    got: list[str] = json.loads(base64.b64decode(kvs[0]["value"])) if kvs else []
    return got


def in_sync(node: Node, size: int) -> bool:
    return len(node.cluster()["isr"]) == size


@pytest.mark.parametrize("rounds", [1, pytest.param(10, marks=pytest.mark.slow)])
def test_kill_9_of_the_leader_in_four_protocols_loses_no_confirmed_message(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node], rounds: int
) -> None:
    _etcd, nodes, leader = start_three(etcd_cluster, start_node)
    pubs: list[Publisher] = [
        cls(name_=proto, nodes=lambda: list(nodes), deadline_s=280.0)
        for proto, cls in PROTOCOLS.items()
    ]
    for p in pubs:
        p.start()
    for p in pubs:
        p.wait_confirms(20)
    failovers = []
    try:
        for rnd in range(rounds):
            epoch = leader.cluster()["epoch"]
            killed_at = time.monotonic()
            leader.kill()
            name, new_epoch = wait_for("a new leader", lambda: one_leader(nodes))
            elected = time.monotonic() - killed_at
            assert new_epoch > epoch
            for p in pubs:  # every publisher confirms again, on the new leader
                p.wait_confirms(10)
            resumed = time.monotonic() - killed_at
            failovers.append((elected, resumed))
            print(
                f"round {rnd}: {leader.name} -> {name}, elected after {elected:.2f} s, "
                f"all four confirming after {resumed:.2f} s"
            )
            # the killed node comes back on its directory, as a follower of the newer epoch
            nodes.remove(leader)
            nodes.append(start_node(**leader.spec))
            leader = next(n for n in nodes if n.name == name)
            wait_for("three in sync again", functools.partial(in_sync, leader, 3))
            for p in pubs:
                p.wait_confirms(10)
    finally:
        for p in pubs:
            p.stop()
        for p in pubs:
            p.join(timeout=60)
    reports = check(pubs, drain(leader))
    elected_s = sorted(e for e, _ in failovers)
    print(
        f"{rounds} rounds: elected p50 {elected_s[len(elected_s) // 2]:.2f} s, "
        f"max {elected_s[-1]:.2f} s; confirmed {sum(r.confirmed for r in reports)}, "
        f"duplicates {sum(r.duplicates for r in reports)}"
    )


def test_kill_9_of_a_follower_leaves_the_isr_in_etcd_before_the_next_confirm(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    proxies: list[DelayProxy] = []

    def slow_etcd(etcd: EtcdCluster) -> str:
        # every etcd request of the nodes takes 0.15 s longer (module DelayProxy): a confirm
        # released before the ISR write reached etcd would come well before the write lands
        proxies.append(DelayProxy(("127.0.0.1", etcd.members[0].client), 0.15))
        return proxies[-1].url

    # a longer lease: the slower renewals keep well inside it on a loaded machine
    etcd, nodes, leader = start_three(etcd_cluster, start_node, slow_etcd, ttl_s=4)
    load = [Amqp091(name_=f"load{i}", nodes=lambda: list(nodes), deadline_s=200.0) for i in (1, 2)]
    for p in load:
        p.start()
    conn = pika.BlockingConnection(pika.ConnectionParameters(leader.host, leader.port))
    ch = conn.channel()
    ch.confirm_delivery()
    props = pika.BasicProperties(delivery_mode=2)
    # and writes without confirms all along: the live follower's acknowledgements keep coming
    # while the ISR write is under way, so a leader that released confirms on them before
    # etcd had the smaller set would do so then
    stop_noise = threading.Event()
    noise = threading.Thread(target=_noise, args=(leader, stop_noise), daemon=True)
    noise.start()
    try:
        for p in load:
            p.wait_confirms(20)
        victim = next(n for n in nodes if n is not leader)
        assert victim.name in etcd_isr(etcd)
        victim.kill()
        killed_at = time.monotonic()
        # Sent after the victim died, so the victim never acknowledged it: the leader may
        # confirm it only once etcd's ISR no longer names the victim. etcd reads are
        # linearizable, so a read made after the confirm sees every write made before it.
        ch.basic_publish("", QUEUE, b"probe:0", props)
        isr_after_confirm = etcd_isr(etcd)
        stall = time.monotonic() - killed_at
        print(f"confirms stalled {stall:.2f} s after the kill (isr_timeout_ms 1500)")
        assert victim.name not in isr_after_confirm, isr_after_confirm
        for p in load:  # and the others' confirms resume
            p.wait_confirms(20)
        # restarted on its directory and ports, it syncs from the leader and is back in the ISR
        back = start_node(**victim.spec)
        nodes[nodes.index(victim)] = back
        wait_for("back in the ISR", lambda: victim.name in etcd_isr(etcd))
        print(
            "rejoin:",
            [ln for ln in back.log_path.read_text().splitlines() if "replication" in ln][:3],
        )
        for p in load:
            p.wait_confirms(20)
    finally:
        for p in load:
            p.stop()
        for p in load:
            p.join(timeout=60)
        stop_noise.set()
        noise.join(timeout=30)
        if conn.is_open:
            conn.close()
    try:
        got = drain(leader)
    finally:
        for proxy in proxies:
            proxy.close()
    assert b"probe:0" in got
    check(load, [b for b in got if not b.startswith(b"probe:")])


def _noise(node: Node, stop: threading.Event) -> None:
    """Persistent publishes without confirms to another queue, about 200 a second, until
    `stop` (bounded by count too)."""
    conn = pika.BlockingConnection(pika.ConnectionParameters(node.host, node.port))
    try:
        ch = conn.channel()
        ch.queue_declare("noise", durable=True)
        props = pika.BasicProperties(delivery_mode=2)
        for _ in range(100_000):
            if stop.is_set():
                break
            ch.basic_publish("", "noise", b"x", props)
            conn.process_data_events(time_limit=0.005)
    finally:
        if conn.is_open:
            conn.close()
