"""A publish the broker refuses reaches no consumer (the durability hold, core/queue/hold.py).

The store's writes or fsyncs fail on purpose while a pika consumer is attached to the durable
queue: every publish the broker nacks stays unseen by it, in the write that failed and while
the disk alarm is on; what was confirmed is delivered; after a failed write the refused
messages do not come back at a restart either (their ENQUEUEs are cancelled in the journal).
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

import pika
import pika.exceptions
import pytest

from ringmq.node import BrokerThread
from ringmq.storage import journal
from tests.integration.conftest import BrokerFactory, wait_until

pytestmark = pytest.mark.integration

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def _connect(b: BrokerThread) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port, heartbeat=0))


def _publish(ch: pika.adapters.blocking_connection.BlockingChannel, body: bytes) -> bool:
    try:
        ch.basic_publish("", "dq", body, PERSISTENT)
    except pika.exceptions.NackError:
        return False
    return True


@pytest.mark.parametrize("fault", ["write", "fsync"])
def test_nacked_publishes_reach_no_consumer(
    broker_factory: BrokerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    data = tmp_path / "data"
    b = broker_factory(data_dir=data)
    got: list[bytes] = []
    sub = _connect(b)
    sch = sub.channel()
    sch.queue_declare("dq", durable=True)
    sch.basic_qos(prefetch_count=1000)

    def on_message(
        ch: pika.adapters.blocking_connection.BlockingChannel,
        m: pika.spec.Basic.Deliver,
        _p: pika.BasicProperties,
        body: bytes,
    ) -> None:
        got.append(body)
        ch.basic_ack(m.delivery_tag)

    sch.basic_consume("dq", on_message)

    def received(n: int) -> bool:
        sub.process_data_events(0.01)
        return len(got) >= n

    pub = _connect(b)  # left open while blocked: a blocked connection is not read
    events: list[str] = []
    pub.add_on_connection_blocked_callback(lambda _c, _m: events.append("blocked"))
    pub.add_on_connection_unblocked_callback(lambda _c, _m: events.append("unblocked"))
    ch = pub.channel()
    ch.confirm_delivery()
    confirmed = [b"c%d" % i for i in range(10)]
    for body in confirmed:
        assert _publish(ch, body)
    wait_until(lambda: received(len(confirmed)))
    # the consumer's acks are journal writes too: let them land and be made durable first,
    # or the fault hits them, the alarm is on before n1 and n1 blocks the publisher unread
    commit = b.server.commit
    assert commit is not None
    q = b.broker.vhosts["/"].queues["dq"].queue

    def settled() -> bool:
        sub.process_data_events(0.01)
        return b.call(
            lambda: (
                q.message_count == 0
                and q.unacked_count == 0
                and commit.store.durable_position == commit.store.position
            )
        )

    wait_until(settled)

    real_write_all, real_datasync = journal.write_all, journal._datasync

    def full_write(fd: int, data: bytes | bytearray) -> None:
        os.write(fd, bytes(data[:5]))  # part of a record lands, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def bad_fsync(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    if fault == "write":
        monkeypatch.setattr(journal, "write_all", full_write)
    else:
        monkeypatch.setattr(journal, "_datasync", bad_fsync)
    assert not _publish(ch, b"n1")  # its write (or fsync) fails: nacked
    assert not _publish(ch, b"n2")  # the alarm is on: refused before it is enqueued

    def pub_saw(what: str) -> bool:
        pub.process_data_events(0.01)
        return what in events

    wait_until(lambda: pub_saw("blocked"))
    sub.process_data_events(0.3)  # a consumer with credit, attached all along
    assert got == confirmed  # neither n1 nor n2 reached it
    dq = b.call(lambda: b.broker.vhosts["/"].queues["dq"].queue.message_count)
    assert dq == 0  # the refused messages left the queue

    if fault == "write":
        monkeypatch.setattr(journal, "write_all", real_write_all)
        wait_until(lambda: pub_saw("unblocked"))  # the periodic probe wrote the backlog
        assert _publish(ch, b"after")
        confirmed.append(b"after")
        wait_until(lambda: received(len(confirmed)))
        assert got == confirmed
    else:
        monkeypatch.setattr(journal, "_datasync", real_datasync)
    sub.close()
    if fault == "write":
        pub.close()
    b.stop()  # closes a blocked connection from the broker's side

    def pub_closed() -> bool:
        if not pub.is_closed:
            with contextlib.suppress(pika.exceptions.AMQPError):
                pub.process_data_events(0.01)
        return bool(pub.is_closed)

    wait_until(pub_closed)
    if fault == "fsync":
        return  # a failed fsync fences the store: nothing more is written (docs/storage.md)
    b2 = broker_factory(data_dir=data)
    with _connect(b2) as conn:
        c2 = conn.channel()
        left = []
        for _ in range(100):
            _m, _p, body = c2.basic_get("dq", auto_ack=True)
            if body is None:
                break
            left.append(body)
    assert left == []  # every confirmed one was consumed; the refused ones stay cancelled
