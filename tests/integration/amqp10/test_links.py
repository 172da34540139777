"""AMQP 1.0 link features with python-qpid-proton: receiver priorities from the attach's
properties (Artemis `priority`, RabbitMQ 4 `rabbitmq:priority`), durable no-local
subscriptions keyed by the subscriber's container id, and dynamic targets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from proton import Described, Message, symbol
from proton import int32 as i32
from proton.reactor import Container, Copy, DurableSubscription, Filter, LinkOption
from proton.utils import BlockingConnection, BlockingReceiver, LinkDetached

from ringmq.node import BrokerThread
from tests.facade import admin_of
from tests.integration.conftest import BrokerFactory, wait_until

pytestmark = pytest.mark.integration


class LinkProperties(LinkOption):
    """The attach's `properties` map."""

    def __init__(self, properties: dict[Any, Any]) -> None:
        self.properties = properties

    def apply(self, link: Any) -> None:
        link.properties = self.properties


def connect(b: BrokerThread, container_id: str | None = None) -> BlockingConnection:
    container = Container()
    if container_id is not None:
        container.container_id = container_id
    return BlockingConnection(
        f"amqp://guest:guest@127.0.0.1:{b.port}", timeout=10, container=container
    )


def receive_all(rcv: BlockingReceiver, timeout_s: float = 0.3) -> list[Any]:
    """What `rcv` holds or gets within `timeout_s` of the last message, accepted."""
    out: list[Any] = []
    while True:
        try:
            m = rcv.receive(timeout=timeout_s)
        except Exception:  # noqa: BLE001 (proton's Timeout)
            return out
        out.append(m.body)
        rcv.accept()


# ---------------------------------------------------------------------- priority
@pytest.mark.parametrize("name", ["priority", "rabbitmq:priority"])
def test_the_higher_priority_receiver_gets_the_messages_while_it_has_credit(
    broker: BrokerThread, name: str
) -> None:
    c = connect(broker)
    try:
        # the low one attaches first: round robin would serve it first
        low = c.create_receiver(
            "prio-q", name="low", credit=0, options=LinkProperties({symbol(name): i32(1)})
        )
        high = c.create_receiver(
            "prio-q", name="high", credit=0, options=LinkProperties({symbol(name): i32(5)})
        )
        low.link.flow(10)
        high.link.flow(3)
        snd = c.create_sender("prio-q")
        for i in range(5):
            snd.send(Message(body=f"m{i}"))
        # the high one takes all it has credit for, the rest goes to the low one (the low
        # one is read first: proton's receive grants one more credit to a link that has none)
        got_low = [low.receive(timeout=5).body for _ in range(2)]
        got_high = [high.receive(timeout=5).body for _ in range(3)]
        assert got_high == ["m0", "m1", "m2"]
        assert got_low == ["m3", "m4"]
    finally:
        c.close()


def test_a_priority_that_is_not_an_integer_refuses_the_attach(broker: BrokerThread) -> None:
    c = connect(broker)
    try:
        with pytest.raises(LinkDetached, match="invalid-field"):
            c.create_receiver("prio-bad", options=LinkProperties({symbol("priority"): "high"}))
    finally:
        c.close()


# ---------------------------------------------------------------------- no-local
NO_LOCAL = Filter({symbol("no-local"): Described(symbol("apache.org:no-local-filter:list"), [])})


def durable_no_local(c: BlockingConnection, credit: int = 0) -> BlockingReceiver:
    """The durable no-local subscription `nl-sub` to `topic://nl-news` (Qpid JMS'
    `createDurableSubscriber(topic, name, null, true)`)."""
    return c.create_receiver(
        "topic://nl-news", name="nl-sub", credit=credit, options=[DurableSubscription(), NO_LOCAL]
    )


def publish(b: BrokerThread, container_id: str, body: str) -> None:
    """`body` to `topic://nl-news` from a new connection of `container_id`."""
    c = connect(b, container_id)
    try:
        c.create_sender("topic://nl-news").send(Message(body=body, durable=True))
    finally:
        c.close()


def test_a_durable_no_local_subscription_keys_the_rule_by_container_id(
    broker: BrokerThread,
) -> None:
    c = connect(broker, "nl-client")
    durable_no_local(c)
    publish(broker, "nl-client", "mine, attached")  # another connection, same container
    publish(broker, "someone", "theirs, attached")
    c.close()  # the subscription is detached (not closed): the rule stays with it
    publish(broker, "nl-client", "mine, detached")
    publish(broker, "someone", "theirs, detached")
    c = connect(broker, "nl-client")
    try:
        got = receive_all(durable_no_local(c, credit=10))
    finally:
        c.close()
    assert got == ["theirs, attached", "theirs, detached"]


def test_the_rule_holds_after_a_restart_and_a_reattach(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    b = broker_factory(data_dir=tmp_path / "d")
    c = connect(b, "nl-client")
    durable_no_local(c)
    c.close()
    b.stop()
    b = broker_factory(data_dir=tmp_path / "d")
    c = connect(b, "nl-client")
    durable_no_local(c).link.detach()  # re-attached (the rule back), detached again
    c.close()
    publish(b, "nl-client", "mine")
    publish(b, "someone", "theirs")
    c = connect(b, "nl-client")
    try:
        got = receive_all(durable_no_local(c, credit=10))
    finally:
        c.close()
    assert got == ["theirs"]


# ---------------------------------------------------------------------- dynamic targets
class DynamicTarget(LinkOption):
    """A sender's target with `dynamic=true` (Qpid JMS `createTemporaryQueue` attaches one)."""

    def apply(self, link: Any) -> None:
        link.target.dynamic = True


def queues(b: BrokerThread) -> set[str]:
    return set(b.call(lambda: list(b.broker.vhosts["/"].queues)))


def test_a_dynamic_target_is_a_temporary_queue_that_goes_with_its_link(
    broker: BrokerThread,
) -> None:
    c, other = connect(broker), connect(broker)
    try:
        snd = c.create_sender(None, name="temp", options=DynamicTarget())
        address = snd.link.remote_target.address
        assert address in queues(broker)
        snd.send(Message(body="through the link"))
        other.create_sender(address).send(Message(body="to its address"))  # as a reply-to
        rcv = c.create_receiver(address, name="temp-reader", credit=10)
        assert receive_all(rcv) == ["through the link", "to its address"]
        rcv.close()
        assert address in queues(broker)  # not auto-delete: the sender's link holds it
        snd.close()
        wait_until(lambda: address not in queues(broker))
    finally:
        c.close()
        other.close()


# ---------------------------------------------------------------------- distribution mode
def test_a_durable_subscriber_asking_for_copy_consumes(broker: BrokerThread) -> None:
    # Qpid JMS attaches its durable subscribers with distribution-mode copy: on a multicast
    # address that is a subscription, not a browser (Artemis reads it so too)
    c = connect(broker, "copy-client")
    try:
        sub = c.create_receiver(
            "topic://copy-news", name="jms-sub", credit=10, options=[DurableSubscription(), Copy()]
        )
        c.create_sender("topic://copy-news").send(Message(body="once"))
        assert receive_all(sub) == ["once"]
        sub.detach()
        info = broker.call(lambda: admin_of(broker).queue("/", "copy-client.jms-sub"))
        assert (info.messages_ready, info.messages_unacknowledged) == (0, 0)
    finally:
        c.close()
