"""aio-pika's robust connection rides out a kill -9 of the leader (`-m cluster`).

An asyncio publisher (aio-pika `connect_robust`, publisher confirms) talks to a follower of a
3-node etcd cluster, which relays it to the leader. The leader is killed with SIGKILL partway
through; the robust connection reconnects through the same follower (which then leads or relays
to the new leader) and the publisher resends the message it was unsure of with the same message
id, so the quorum queue's de-duplication window keeps it once. The checker drains the queue:
every confirmed message is there, nothing that was never published, no duplicate. Waits are
bounded against hanging, never timed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aio_pika
import pytest

from tests.cluster.conftest import EtcdCluster, Node
from tests.cluster.test_election_etcd import one_leader, wait_for
from tests.cluster.test_follower_proxy import reconnect, start_three

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

QUEUE = "aio-failover"
ARGS = {"x-queue-type": "quorum", "x-message-deduplication-window-ms": 600_000}
COUNT = 60
KILL_AT = 20


async def _publish_through(via: Node, leader: Node) -> tuple[list[int], int]:
    """Publish 0..COUNT-1 through `via`, killing `leader` after KILL_AT confirms; returns the
    confirmed numbers and how many publishes failed (each retried with the same message id)."""
    url = f"amqp://guest:guest@127.0.0.1:{via.port}/"
    conn = await aio_pika.connect_robust(url, reconnect_interval=0.3, timeout=10)
    confirmed: list[int] = []
    failed = 0
    try:
        channel = await conn.channel(publisher_confirms=True)
        await channel.declare_queue(QUEUE, durable=True, arguments=ARGS)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 180  # a bound against hanging, not a measurement
        i = 0
        while i < COUNT:
            assert loop.time() < deadline, f"stuck at message {i}; confirmed {confirmed}"
            if i == KILL_AT and leader.proc.poll() is None:
                leader.kill()
            message = aio_pika.Message(
                str(i).encode(),
                message_id=f"m{i}",
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            )
            try:
                await channel.default_exchange.publish(message, routing_key=QUEUE, timeout=10)
            except (aio_pika.exceptions.AMQPError, ConnectionError, TimeoutError, RuntimeError):
                failed += 1
                await asyncio.sleep(0.3)  # the robust connection reconnects; resend `i`
                continue
            confirmed.append(i)
            i += 1
    finally:
        await conn.close()
    return confirmed, failed


def test_aio_pika_robust_publisher_through_a_follower_survives_a_leader_kill(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    leader, followers, nodes = start_three(etcd_cluster, start_node)
    via = followers[0]
    confirmed, failed = asyncio.run(_publish_through(via, leader))
    assert confirmed == list(range(COUNT))
    assert failed > 0  # the kill was felt mid-stream: the failover path was taken
    assert leader.proc.poll() is not None  # it was killed
    name, _ = wait_for("a leader", lambda: one_leader([n for n in nodes if n is not leader]))
    assert name != leader.name
    conn = reconnect(via)
    try:
        ch = conn.channel()
        got: list[int] = []
        for _ in range(COUNT * 2):  # bounded
            method, _props, body = ch.basic_get(QUEUE, auto_ack=True)
            if method is None:
                break
            got.append(int(body))
    finally:
        conn.close()
    assert sorted(got) == list(range(COUNT)), got  # none lost, none never published, no dupes
