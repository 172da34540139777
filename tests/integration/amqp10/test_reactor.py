"""AMQP 1.0 with python-qpid-proton's event-driven API (`proton.reactor.Container`):
transactions committed and rolled back, on the sending and on the receiving side."""

from __future__ import annotations

from typing import Any

import pytest
from proton import Message
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container

from ringmq.node import BrokerThread
from tests.facade import admin_of

pytestmark = pytest.mark.integration


def ready(b: BrokerThread, queue: str) -> int:
    info = b.call(lambda: admin_of(b).queue("/", queue))
    return int(info.messages_ready)


class TxSend(MessagingHandler, TransactionHandler):
    """Send `bodies` in one transaction, then commit it or roll it back."""

    def __init__(self, url: str, queue: str, bodies: list[str], commit: bool) -> None:
        super().__init__()
        self.url, self.queue, self.bodies, self.commit = url, queue, bodies, commit
        self.outcome = ""

    def on_start(self, event: Any) -> None:
        self.conn = event.container.connect(self.url)
        self.sender = event.container.create_sender(self.conn, self.queue)
        event.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event: Any) -> None:
        for body in self.bodies:
            event.transaction.send(self.sender, Message(body=body))
        if self.commit:
            event.transaction.commit()
        else:
            event.transaction.abort()

    def on_transaction_committed(self, event: Any) -> None:
        self.outcome = "committed"
        self.conn.close()

    def on_transaction_aborted(self, event: Any) -> None:
        self.outcome = "aborted"
        self.conn.close()


class TxReceive(MessagingHandler, TransactionHandler):
    """Take `count` messages, accept them in a transaction, then commit or roll back."""

    def __init__(self, url: str, queue: str, count: int, commit: bool) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.url, self.queue, self.count, self.commit = url, queue, count, commit
        self.got: list[str] = []
        self.outcome = ""
        self.txn: Any = None

    def on_start(self, event: Any) -> None:
        self.conn = event.container.connect(self.url)
        self.receiver = event.container.create_receiver(self.conn, self.queue)
        event.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event: Any) -> None:
        self.txn = event.transaction
        self.receiver.flow(self.count)

    def on_message(self, event: Any) -> None:
        self.got.append(event.message.body)
        self.txn.accept(event.delivery)
        if len(self.got) == self.count:
            if self.commit:
                self.txn.commit()
            else:
                self.txn.abort()

    def on_transaction_committed(self, event: Any) -> None:
        self.outcome = "committed"
        self.conn.close()

    def on_transaction_aborted(self, event: Any) -> None:
        self.outcome = "aborted"
        self.conn.close()


def run(handler: Any) -> None:
    c = Container(handler)
    c.timeout = 10
    c.run()


def test_transactional_sends(broker: BrokerThread) -> None:
    url = f"amqp://guest:guest@127.0.0.1:{broker.port}"
    h = TxSend(url, "txq", ["a", "b"], commit=True)
    run(h)
    assert h.outcome == "committed"
    assert ready(broker, "txq") == 2
    h = TxSend(url, "txq", ["c"], commit=False)
    run(h)
    assert h.outcome == "aborted"
    assert ready(broker, "txq") == 2


def test_transactional_accepts(broker: BrokerThread) -> None:
    url = f"amqp://guest:guest@127.0.0.1:{broker.port}"
    run(TxSend(url, "txr", ["a", "b", "c"], commit=True))
    h = TxReceive(url, "txr", 2, commit=False)
    run(h)
    assert (h.outcome, h.got) == ("aborted", ["a", "b"])
    assert ready(broker, "txr") == 3  # rolled back: both are back
    h = TxReceive(url, "txr", 2, commit=True)
    run(h)
    assert (h.outcome, h.got) == ("committed", ["a", "b"])
    assert ready(broker, "txr") == 1
