"""An AMQP 1.0 session in management's channel list (python-qpid-proton): one channel per
session, its open transactions included, with its receivers as that channel's consumers;
and in the core: one core session per AMQP 1.0 session, no helper sessions."""

from __future__ import annotations

from typing import Any

import pytest
from proton import Message
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container
from proton.utils import BlockingConnection

from ringmq.management.records import ChannelInfo, ConsumerInfo
from ringmq.node import BrokerThread
from tests.facade import admin_of

pytestmark = pytest.mark.integration


def core_sessions(b: BrokerThread) -> list[list[int]]:
    """The core's session numbers of each open connection."""
    return b.call(lambda: [sorted(c.sessions) for c in b.broker.state.conns.values()])


def listing(b: BrokerThread) -> tuple[list[ChannelInfo], list[ConsumerInfo]]:
    return b.call(lambda: (admin_of(b).channels(), admin_of(b).consumers()))


def test_a_session_is_one_channel_with_its_receivers(broker: BrokerThread) -> None:
    c = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{broker.port}", timeout=5)
    try:
        c.create_sender("m-q").send(Message(body="x"))  # unsettled: confirmed
        r1 = c.create_receiver("m-q", name="r1")
        c.create_receiver("topic://m-t", name="r2")
        assert r1.receive(timeout=5).body == "x"  # out to r1, not settled yet
        channels, consumers = listing(broker)
        (ch,) = channels
        assert ch.number < 1 << 16
        assert ch.consumer_count == 2
        assert ch.confirm  # its unsettled sends are confirmed
        assert ch.messages_unacknowledged == 1
        assert sorted(x.channel for x in consumers) == [ch.number, ch.number]
        assert {x.queue for x in consumers} >= {"m-q"}
    finally:
        c.close()


class TxOpen(MessagingHandler, TransactionHandler):
    """Declare a transaction beside a receiver, list the channels, then roll back."""

    def __init__(self, b: BrokerThread) -> None:
        super().__init__()
        self.b = b
        self.seen: tuple[list[ChannelInfo], list[ConsumerInfo]] | None = None
        self.core: list[list[int]] | None = None

    def on_start(self, event: Any) -> None:
        url = f"amqp://guest:guest@127.0.0.1:{self.b.port}"
        self.conn = event.container.connect(url)
        event.container.create_receiver(self.conn, "tx-q")
        event.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event: Any) -> None:
        self.seen = listing(self.b)
        self.core = core_sessions(self.b)
        event.transaction.abort()

    def on_transaction_aborted(self, event: Any) -> None:
        self.conn.close()


def test_an_open_transaction_is_no_channel_of_its_own(broker: BrokerThread) -> None:
    h = TxOpen(broker)
    Container(h).run()
    assert h.seen is not None
    channels, consumers = h.seen
    assert len(channels) == 1
    (ch,) = channels
    assert ch.number < 1 << 16
    assert ch.transactional
    assert [x.channel for x in consumers] == [ch.number]


def test_a_transaction_opens_no_core_session(broker: BrokerThread) -> None:
    h = TxOpen(broker)
    Container(h).run()
    assert h.seen is not None
    assert h.core is not None
    channels, _consumers = h.seen
    (ch,) = channels
    # exactly the connection's AMQP 1.0 sessions: the one proton began, no helper beside it
    assert h.core == [[ch.number]]
