"""AMQP 1.0 JMS selectors (source filter `apache.org:selector-filter:string`) with
python-qpid-proton's blocking API and `proton.reactor.Selector`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from proton import Message
from proton.reactor import Copy, Selector
from proton.utils import BlockingConnection, BlockingReceiver, LinkDetached

from ringmq.node import BrokerThread
from tests.facade import admin_of

pytestmark = pytest.mark.integration


@pytest.fixture
def conn(broker: BrokerThread) -> Iterator[BlockingConnection]:
    c = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{broker.port}", timeout=10)
    yield c
    c.close()


def ready(b: BrokerThread, queue: str) -> int:
    return int(b.call(lambda: admin_of(b).queue("/", queue)).messages_ready)


def receive_all(rcv: BlockingReceiver) -> list[Any]:
    out: list[Any] = []
    while True:
        try:
            m = rcv.receive(timeout=0.3)
        except Exception:  # noqa: BLE001 (proton's Timeout)
            return out
        out.append(m.body)
        rcv.accept()


def send(conn: BlockingConnection, address: str, items: list[tuple[str, str | None]]) -> None:
    snd = conn.create_sender(address)
    for body, colour in items:
        props = {} if colour is None else {"colour": colour}
        snd.send(Message(body=body, properties=props))
    snd.close()


ITEMS = [("r1", "red"), ("b1", "blue"), ("g1", "green"), ("r2", "red"), ("n1", None)]


def test_complementary_selectors_each_get_their_messages(
    conn: BlockingConnection, broker: BrokerThread
) -> None:
    send(conn, "paint", ITEMS)
    reds = conn.create_receiver("paint", credit=10, name="reds", options=Selector("colour = 'red'"))
    others = conn.create_receiver(
        "paint", credit=10, name="others", options=Selector("colour IN ('blue', 'green')")
    )
    echoed = reds.link.remote_source.filter
    echoed.rewind()
    echoed.next()
    filters = echoed.get_object()
    assert "colour = 'red'" in str(filters)  # the broker applied it and says so
    assert receive_all(reds) == ["r1", "r2"]
    assert receive_all(others) == ["b1", "g1"]
    assert ready(broker, "paint") == 1  # no selector matches n1: it stays
    send(conn, "paint", [("r3", "red"), ("b2", "blue")])  # new ones go to their selector
    assert receive_all(reds) == ["r3"]
    assert receive_all(others) == ["b2"]
    plain = conn.create_receiver("paint", credit=10, name="plain")
    assert receive_all(plain) == ["n1"]


def test_a_browsing_selector(conn: BlockingConnection, broker: BrokerThread) -> None:
    send(conn, "bpaint", ITEMS)
    browser = conn.create_receiver(
        "bpaint", credit=10, name="b", options=[Copy(), Selector("colour <> 'red'")]
    )
    assert receive_all(browser) == ["b1", "g1"]
    assert ready(broker, "bpaint") == 5


def test_an_invalid_selector_is_refused(conn: BlockingConnection) -> None:
    with pytest.raises(LinkDetached) as info:
        conn.create_receiver("paint", name="bad", options=Selector("colour = = 'red'"))
    assert "amqp:invalid-field" in str(info.value)


def test_a_selector_receiver_takes_turns_with_a_plain_one(
    conn: BlockingConnection, broker: BrokerThread
) -> None:
    # Artemis serves filtered and plain consumers round robin: the selector receiver is not
    # served before the plain one
    reds = conn.create_receiver("turns", credit=10, name="reds", options=Selector("colour = 'red'"))
    plain = conn.create_receiver("turns", credit=10, name="plain")
    send(conn, "turns", [(f"r{i}", "red") for i in range(4)])
    assert receive_all(reds) == ["r0", "r2"]
    assert receive_all(plain) == ["r1", "r3"]
