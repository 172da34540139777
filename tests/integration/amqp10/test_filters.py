"""AMQP 1.0 source filters as Qpid JMS and Artemis send them, with python-qpid-proton: no-local
(by symbol and by descriptor code) on multicast subscriptions, the JMS selector by its code,
and filters the broker does not apply left out of its attach (3.5.3)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from proton import Described, Message, symbol, ulong
from proton.reactor import Filter
from proton.utils import BlockingConnection, BlockingReceiver

from ringmq.node import BrokerThread
from tests.facade import admin_of

pytestmark = pytest.mark.integration

NO_LOCAL_FORMS: list[Any] = [symbol("apache.org:no-local-filter:list"), ulong(0x0000468C00000003)]


def connect(b: BrokerThread) -> BlockingConnection:
    return BlockingConnection(f"amqp://guest:guest@127.0.0.1:{b.port}", timeout=10)


@pytest.fixture
def conns(broker: BrokerThread) -> Iterator[tuple[BlockingConnection, BlockingConnection]]:
    a, b = connect(broker), connect(broker)
    yield a, b
    a.close()
    b.close()


def filter_option(filters: dict[str, Any]) -> Filter:
    return Filter({symbol(k): v for k, v in filters.items()})


def echoed(rcv: BlockingReceiver) -> set[str]:
    """The filter names the broker's attach echoes (the ones it applies)."""
    data = rcv.link.remote_source.filter
    data.rewind()
    if data.next() is None:
        return set()
    return {str(k) for k in data.get_object()}


def receive_all(rcv: BlockingReceiver) -> list[Any]:
    out: list[Any] = []
    while True:
        try:
            m = rcv.receive(timeout=0.3)
        except Exception:  # noqa: BLE001 (proton's Timeout)
            return out
        out.append(m.body)
        rcv.accept()


@pytest.mark.parametrize("descriptor", NO_LOCAL_FORMS)
def test_no_local_subscriber_skips_its_own_connections_messages(
    conns: tuple[BlockingConnection, BlockingConnection], descriptor: Any
) -> None:
    mine, other = conns
    sub = mine.create_receiver(
        "topic://news",
        name="nl",
        credit=10,
        options=filter_option({"no-local": Described(descriptor, [])}),
    )
    assert echoed(sub) == {"no-local"}
    plain = other.create_receiver("topic://news", name="all", credit=10)
    mine.create_sender("topic://news").send(Message(body="mine"))
    other.create_sender("topic://news").send(Message(body="theirs"))
    assert receive_all(sub) == ["theirs"]
    assert receive_all(plain) == ["mine", "theirs"]  # only the no-local subscriber skips


def test_no_local_on_a_queue_is_not_applied_and_says_so(
    conns: tuple[BlockingConnection, BlockingConnection], broker: BrokerThread
) -> None:
    mine, _other = conns
    rcv = mine.create_receiver(
        "nl-queue",
        credit=10,
        options=filter_option({"no-local": Described(NO_LOCAL_FORMS[0], [])}),
    )
    assert echoed(rcv) == set()  # Artemis applies no-local to multicast subscriptions only
    mine.create_sender("nl-queue").send(Message(body="mine"))
    assert receive_all(rcv) == ["mine"]


def test_a_selector_by_descriptor_code(
    conns: tuple[BlockingConnection, BlockingConnection], broker: BrokerThread
) -> None:
    mine, _other = conns
    snd = mine.create_sender("code-paint")
    for body, colour in [("r1", "red"), ("b1", "blue")]:
        snd.send(Message(body=body, properties={"colour": colour}))
    rcv = mine.create_receiver(
        "code-paint",
        credit=10,
        options=filter_option(
            {"jms-selector": Described(ulong(0x0000468C00000004), "colour = 'red'")}
        ),
    )
    assert echoed(rcv) == {"jms-selector"}
    assert receive_all(rcv) == ["r1"]
    assert broker.call(lambda: admin_of(broker).queue("/", "code-paint")).messages_ready == 1


def test_an_unknown_filter_is_left_out_of_the_reply(
    conns: tuple[BlockingConnection, BlockingConnection],
) -> None:
    mine, _other = conns
    rcv = mine.create_receiver(
        "topic://weather",
        credit=10,
        options=filter_option(
            {
                "xq": Described(symbol("apache.org:xquery-filter:string"), "x"),
                "jms-selector": Described(
                    symbol("apache.org:selector-filter:string"), "city = 'Oslo'"
                ),
            }
        ),
    )
    assert echoed(rcv) == {"jms-selector"}  # the xquery filter was not applied
