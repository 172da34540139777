"""AMQP 1.0 browsing: a receiver whose source says `distribution-mode: copy` (Qpid JMS
QueueBrowser, `proton.reactor.Copy()`) reads a queue without consuming it, with
python-qpid-proton's blocking API."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from proton import Message, Terminus
from proton._utils import Fetcher
from proton.reactor import Copy
from proton.utils import BlockingConnection, BlockingReceiver

from ringmq.node import BrokerThread
from tests.facade import admin_of

pytestmark = pytest.mark.integration


@pytest.fixture
def conn(broker: BrokerThread) -> Iterator[BlockingConnection]:
    c = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{broker.port}", timeout=10)
    yield c
    c.close()


def fetcher(rcv: BlockingReceiver) -> Fetcher:
    assert rcv.fetcher is not None
    return rcv.fetcher


def counts(b: BrokerThread, queue: str) -> tuple[int, int]:
    info = b.call(lambda: admin_of(b).queue("/", queue))
    return int(info.messages_ready), int(info.messages_unacknowledged)


def receive_all(rcv: BlockingReceiver, *, accept: bool = True) -> list[Any]:
    out: list[Any] = []
    while True:
        try:
            m = rcv.receive(timeout=0.3)
        except Exception:  # noqa: BLE001 (proton's Timeout)
            return out
        out.append(m.body)
        if accept:
            rcv.accept()


def send(conn: BlockingConnection, address: str, bodies: list[Any]) -> None:
    snd = conn.create_sender(address)
    for body in bodies:
        snd.send(Message(body=body))
    snd.close()


def test_a_browser_sees_the_queue_and_leaves_it(
    conn: BlockingConnection, broker: BrokerThread
) -> None:
    send(conn, "browsed", [f"m{i}" for i in range(5)])
    browser = conn.create_receiver("browsed", credit=10, options=Copy())
    assert browser.link.remote_source.distribution_mode == Terminus.DIST_MODE_COPY
    assert receive_all(browser) == [f"m{i}" for i in range(5)]  # accepting does nothing
    browser.close()
    assert counts(broker, "browsed") == (5, 0)
    rcv = conn.create_receiver("browsed", credit=10)
    assert receive_all(rcv) == [f"m{i}" for i in range(5)]


def test_a_browser_and_a_consumer_side_by_side(
    conn: BlockingConnection, broker: BrokerThread
) -> None:
    send(conn, "side", ["a", "b", "c"])
    browser = conn.create_receiver("side", credit=10, name="side-browser", options=Copy())
    assert receive_all(browser) == ["a", "b", "c"]
    rcv = conn.create_receiver("side", credit=10)
    assert receive_all(rcv) == ["a", "b", "c"]  # the browser took none of them
    assert counts(broker, "side") == (0, 0)


def test_a_browser_sees_new_messages_as_they_arrive(
    conn: BlockingConnection, broker: BrokerThread
) -> None:
    browser = conn.create_receiver("live", credit=10, options=Copy())
    assert receive_all(browser) == []
    send(conn, "live", ["late-1"])
    assert browser.receive(timeout=5).body == "late-1"
    send(conn, "live", ["late-2", "late-3"])
    assert receive_all(browser) == ["late-2", "late-3"]
    assert counts(broker, "live") == (3, 0)


def test_a_browser_spends_credit_and_drains(conn: BlockingConnection, broker: BrokerThread) -> None:
    send(conn, "bcredit", [0, 1, 2])
    browser = conn.create_receiver("bcredit", credit=0, options=Copy())
    link = browser.link
    link.flow(2)  # two credits: two of the three
    conn.wait(lambda: fetcher(browser).has_message == 2 and link.credit == 0, timeout=5)
    link.drain(10)  # one more to browse, nine come back
    conn.wait(lambda: fetcher(browser).has_message == 3 and link.credit == 0, timeout=5)
    assert [fetcher(browser).pop().body for _ in range(3)] == [0, 1, 2]
    link.drain(4)  # the browser is at the end: all of it comes back, though 3 are ready
    conn.wait(lambda: link.credit == 0, timeout=5)
    assert fetcher(browser).has_message == 0
    assert counts(broker, "bcredit") == (3, 0)
