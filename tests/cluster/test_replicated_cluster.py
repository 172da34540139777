"""Three replicated ringmq nodes on etcd: confirmed messages survive a kill -9 (`-m cluster`).

The leader serves clients from its store and streams the log to its followers; a confirm waits
for every follower in the ISR. The checker counts lost confirmed messages (must be 0) and
reports duplicates. Waits are bounded against hanging, never timed.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import pika
import pytest

from tests.cluster.conftest import EtcdCluster, Node
from tests.cluster.test_election_etcd import one_leader, wait_for

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(240),
]

QUEUE = "replicated"
ISR_TIMEOUT = "isr_timeout_ms = 1500\n"
ROUNDS = 2


def start_three(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> tuple[list[Node], Node]:
    etcd = etcd_cluster(1)
    nodes = [start_node(n, etcd.endpoints, extra_config=ISR_TIMEOUT) for n in ("n1", "n2", "n3")]
    leader, _ = wait_for("one leader", lambda: one_leader(nodes))
    # the followers are in the ISR once they acknowledged the leader's log (bulk sync first)
    wait_for("three in sync", lambda: len(nodes[0].cluster()["isr"]) == 3)
    return nodes, next(n for n in nodes if n.name == leader)


def isr_size(node: Node, size: int) -> bool:
    return len(node.cluster()["isr"]) == size


def connect(node: Node) -> pika.BlockingConnection:
    params = pika.ConnectionParameters(
        "127.0.0.1", node.port, connection_attempts=3, retry_delay=0.2, socket_timeout=10
    )
    return pika.BlockingConnection(params)


def publish(node: Node, ids: range) -> list[int]:
    """Publish `ids` with confirms; the ids the leader confirmed."""
    confirmed: list[int] = []
    conn = connect(node)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(QUEUE, durable=True)
        props = pika.BasicProperties(delivery_mode=2)
        for i in ids:
            ch.basic_publish("", QUEUE, str(i).encode(), props)  # raises unless confirmed
            confirmed.append(i)
    finally:
        if conn.is_open:
            conn.close()
    return confirmed


def drain(node: Node) -> list[int]:
    """Every message the node's queue holds (acknowledged)."""
    conn = wait_for("the new leader's AMQP port", lambda: connect(node))
    got: list[int] = []
    try:
        ch = conn.channel()
        ch.queue_declare(QUEUE, durable=True)
        for _ in range(100_000):  # bounded
            method, _props, body = ch.basic_get(QUEUE, auto_ack=True)
            if method is None:
                break
            got.append(int(body))
    finally:
        conn.close()
    return got


def check(confirmed: list[int], got: list[int]) -> None:
    lost = set(confirmed) - set(got)
    duplicates = len(got) - len(set(got))
    print(f"confirmed {len(confirmed)}, delivered {len(got)}, duplicates {duplicates}")
    assert not lost, f"{len(lost)} confirmed messages lost: {sorted(lost)[:20]}"


# slow: test_faults_kill.py's four-protocol round covers it in the quick suite
@pytest.mark.slow
def test_kill_9_of_the_leader_loses_no_confirmed_message(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    nodes, leader = start_three(etcd_cluster, start_node)
    confirmed: list[int] = []
    for rnd in range(ROUNDS):
        confirmed += publish(leader, range(rnd * 150, (rnd + 1) * 150))
        epoch = leader.cluster()["epoch"]
        killed_at = time.monotonic()
        leader.kill()
        name, new_epoch = wait_for("a new leader", lambda: one_leader(nodes))
        print(f"failover {leader.name} -> {name}: {time.monotonic() - killed_at:.2f} s")
        assert new_epoch > epoch
        # the deposed leader comes back on its directory as a follower of the newer epoch
        nodes.remove(leader)
        nodes.append(
            start_node(leader.name, leader.etcd, extra_config=ISR_TIMEOUT, ports=leader.ports)
        )
        leader = next(n for n in nodes if n.name == name)
        wait_for("three in sync again", functools.partial(isr_size, leader, 3))
    check(confirmed, drain(leader))


def test_kill_9_of_a_follower_stalls_confirms_until_it_leaves_the_isr_and_it_rejoins(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    nodes, leader = start_three(etcd_cluster, start_node)
    confirmed = publish(leader, range(100))
    victim = next(n for n in nodes if n is not leader)
    victim.kill()
    # the next confirm waits for the dead follower until the leader drops it from the ISR
    stalled_at = time.monotonic()
    confirmed += publish(leader, range(100, 101))
    print(f"confirm stalled {time.monotonic() - stalled_at:.2f} s (isr_timeout 1.5 s)")
    isr = leader.cluster()["isr"]
    assert victim.name not in isr
    confirmed += publish(leader, range(101, 200))
    # restarted on its directory and ports, it syncs from the leader and is back in the ISR
    back = start_node(victim.name, victim.etcd, extra_config=ISR_TIMEOUT, ports=victim.ports)
    wait_for("back in the ISR", lambda: victim.name in leader.cluster()["isr"])
    print("rejoin:", [ln for ln in back.log_path.read_text().splitlines() if "sync" in ln][:3])
    confirmed += publish(leader, range(200, 300))
    # and the rejoined copy holds every confirmed message: it leads after the leader's kill
    others = [n for n in nodes if n is not leader and n is not victim]
    leader.kill()
    for n in others:
        n.kill()  # only the rejoined node may take over
    name, _ = wait_for("the rejoined node leads", lambda: one_leader([back]))
    assert name == victim.name
    check(confirmed, drain(back))


def test_a_fenced_leader_confirms_nothing_more_and_the_next_leader_has_what_it_confirmed(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    etcd = etcd_cluster(1)
    nodes = [start_node(n, etcd.endpoints, extra_config=ISR_TIMEOUT) for n in ("n1", "n2")]
    name, epoch = wait_for("one leader", lambda: one_leader(nodes))
    wait_for("two in sync", lambda: len(nodes[0].cluster()["isr"]) == 2)
    leader = next(n for n in nodes if n.name == name)
    confirmed = publish(leader, range(100))
    conn = connect(leader)
    ch = conn.channel()
    ch.confirm_delivery()
    etcd.members[0].kill()  # no renewal succeeds: the leader fences itself
    wait_for("the leader fenced", lambda: leader.cluster()["role"] == "follower")
    # a publish on a connection opened while it led is never confirmed: the fenced leader
    # closes its clients (and would not release a confirm before that)
    with pytest.raises(pika.exceptions.AMQPError):
        ch.basic_publish("", QUEUE, b"after-the-fence", pika.BasicProperties(delivery_mode=2))
    etcd.members[0].restart()
    name, new_epoch = wait_for("a leader again", lambda: one_leader(nodes))
    assert new_epoch > epoch
    check(confirmed, drain(next(n for n in nodes if n.name == name)))
