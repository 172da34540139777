"""Multicast subscriptions over AMQP 1.0: durable ones survive their link and the broker and go
with an unsubscribe; shared ones share one queue."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from proton import Data, Message
from proton.reactor import Container, DurableSubscription, ReceiverOption
from proton.utils import BlockingConnection

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration


def connect(b: BrokerThread, container_id: str) -> BlockingConnection:
    container = Container()
    container.container_id = container_id
    return BlockingConnection(
        f"amqp://guest:guest@127.0.0.1:{b.port}", timeout=5, container=container
    )


def queues(b: BrokerThread) -> set[str]:
    return set(b.call(lambda: list(b.broker.vhosts["/"].queues)))


def test_durable_subscription_survives_the_link_and_a_restart(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    b = broker_factory(data_dir=tmp_path / "d")
    c = connect(b, "client1")
    sub = c.create_receiver("topic://prices", name="sub1", options=DurableSubscription(), credit=0)
    sub.link.detach()  # detached, not closed: the subscription stays
    c.create_sender("topic://prices").send(Message(body="p1", durable=True))
    c.close()
    assert "client1.sub1" in queues(b)
    b.stop()
    b = broker_factory(data_dir=tmp_path / "d")
    c = connect(b, "client1")
    sub = c.create_receiver("topic://prices", name="sub1", options=DurableSubscription())
    assert sub.receive(timeout=5).body == "p1"
    sub.accept()
    sub.close()  # closed: unsubscribe
    c.close()
    assert "client1.sub1" not in queues(b)


def test_plain_subscriptions_go_with_their_link(broker: BrokerThread) -> None:
    c = connect(broker, "client2")
    sub = c.create_receiver("topic://t")
    assert len(queues(broker)) == 1
    sub.close()
    assert queues(broker) == set()
    c.close()


def test_shared_subscription_shares_one_queue(broker: BrokerThread) -> None:
    class Shared(ReceiverOption):
        def apply(self, receiver: Any) -> None:
            caps = receiver.source.capabilities
            caps.put_array(False, Data.SYMBOL)
            caps.enter()
            caps.put_symbol("topic")
            caps.put_symbol("shared")
            caps.put_symbol("global")
            caps.exit()

    c = connect(broker, "client3")
    r1 = c.create_receiver("jobs", name="workers|global", options=Shared(), credit=10)
    r2 = c.create_receiver("jobs", name="workers|global2", options=Shared(), credit=10)
    assert "workers" in queues(broker)
    snd = c.create_sender("topic://jobs")
    for i in range(4):
        snd.send(Message(body=i))
    got: list[Any] = []
    for r in (r1, r2):
        while True:
            try:
                got.append(r.receive(timeout=0.3).body)
                r.accept()
            except Exception:  # noqa: BLE001 (proton's Timeout)
                break
    assert sorted(got) == [0, 1, 2, 3]  # each message to one of the two
    c.close()
