"""A failing disk (injected ENOSPC / EIO in the store's writes) with a real broker and pika.

Publishes whose data cannot be written are nacked, publishers get connection.blocked, consumers
keep consuming, everything confirmed survives a restart, and (for a failed write) publishing
resumes once the disk accepts writes again.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from ringmq.node import BrokerThread
from ringmq.server.memory import MemoryLimits
from ringmq.storage import journal, pagefile
from tests.integration.conftest import BrokerFactory, wait_until

pytestmark = pytest.mark.integration

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def connect(b: BrokerThread) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port, heartbeat=0))


def drain(b: BrokerThread, queue: str) -> list[bytes]:
    with connect(b) as conn:
        ch = conn.channel()
        out: list[bytes] = []
        for _ in range(1000):
            _m, _p, body = ch.basic_get(queue, auto_ack=True)
            if body is None:
                break
            out.append(body)
        return out


def publish_confirmed(ch: pika.adapters.blocking_connection.BlockingChannel, body: bytes) -> bool:
    try:
        ch.basic_publish("", "dq", body, PERSISTENT)
    except pika.exceptions.NackError:
        return False
    return True


@pytest.mark.parametrize("fault", ["write", "fsync"])
def test_failing_disk_nacks_blocks_and_keeps_confirmed(
    broker_factory: BrokerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    data = tmp_path / "data"
    b = broker_factory(data_dir=data)
    events: list[str] = []
    pub = connect(b)  # not closed by the test while blocked: a blocked connection is not read
    with connect(b) as sub:
        pub.add_on_connection_blocked_callback(lambda _c, _m: events.append("blocked"))
        pub.add_on_connection_unblocked_callback(lambda _c, _m: events.append("unblocked"))
        ch = pub.channel()
        ch.queue_declare("dq", durable=True)
        ch.confirm_delivery()
        confirmed = [b"c%d" % i for i in range(20)]
        for body in confirmed:
            assert publish_confirmed(ch, body)

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
        assert not publish_confirmed(ch, b"n1")  # nacked: the publisher may retry

        def pub_saw(what: str) -> bool:
            pub.process_data_events(0.01)
            return what in events

        assert not publish_confirmed(ch, b"n2")  # alarm on: nacked at once and blocked
        wait_until(lambda: pub_saw("blocked"))
        reasons = [i.blocked_reason for i in b.call(b.server.connections) if i.blocked_reason]
        assert reasons == [reasons[0]]
        assert reasons[0].startswith("disk alarm")
        assert "disk_write" in b.call(lambda: b.broker.alarms)

        # consumers keep consuming and acking (acks that cannot be written are harmless)
        sch = sub.channel()
        got = []
        for _ in range(5):
            m, _p, body = sch.basic_get("dq")
            assert m is not None
            sch.basic_ack(m.delivery_tag)
            got.append(body)
        assert got == confirmed[:5]

        if fault == "write":
            monkeypatch.setattr(journal, "write_all", real_write_all)
            wait_until(lambda: pub_saw("unblocked"))  # the periodic probe wrote the backlog
            assert "disk_write" not in b.call(lambda: b.broker.alarms)
            assert publish_confirmed(ch, b"after")
            confirmed.append(b"after")
        else:
            monkeypatch.setattr(journal, "_datasync", real_datasync)
            sub.process_data_events(0.2)
            assert "disk_write" in b.call(lambda: b.broker.alarms)  # fenced until restart
    if fault == "write":
        pub.close()
    b.stop()  # closes the blocked connection from the broker's side

    def pub_closed() -> bool:
        if not pub.is_closed:
            with contextlib.suppress(pika.exceptions.AMQPError):
                pub.process_data_events(0.01)
        return bool(pub.is_closed)

    wait_until(pub_closed)
    b2 = broker_factory(data_dir=data)
    left = drain(b2, "dq")
    # every confirmed message not acked is back, in order; nacked ones may or may not be
    kept = [m for m in left if m in confirmed]
    if fault == "write":
        assert kept == [m for m in confirmed if m not in got]
    else:  # acks after the fence were not written: those messages come back (redelivered)
        assert kept == confirmed
    assert set(left) <= set(confirmed) | {b"n1", b"n2"}


def test_page_write_failure_on_a_recovered_backlog_raises_the_disk_alarm(
    broker_factory: BrokerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recovered backlog pages in the broker's one paging directory and reports to its one
    disk-health source, so a failed page write blocks publishers as for any other queue."""
    data = tmp_path / "data"
    limits = MemoryLimits(head_count=64, head_bytes=64 * 1024, interval_s=0.05)
    b = broker_factory(data_dir=data, memory=limits)
    # 9.6 MiB: more than a recovering queue's default in-memory head (8 MiB), so recovery
    # leaves the rest of the backlog on disk, in a spill store of its own
    big = b"x" * 8192
    with connect(b) as conn:
        ch = conn.channel()
        ch.queue_declare("dq", durable=True)
        ch.confirm_delivery()
        for i in range(1200):
            ch.basic_publish("", "dq", b"%05d" % i + big, PERSISTENT)
    b.stop()

    b2 = broker_factory(data_dir=data, memory=limits)
    broker2: Any = b2.broker
    assert b2.call(lambda: broker2.durability.recovered_messages) == 1200
    assert b2.call(lambda: b2.broker.vhosts["/"].queues["dq"].queue.spilled) > 0
    body = b"x" * 1024
    assert not (data / "store" / "paging").exists()  # one paging directory: <data>/paging

    def full_write(fd: int, data: bytes | bytearray) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pagefile, "write_all", full_write)
    events: list[str] = []
    pub = connect(b2)  # left open: a blocked connection is not read
    pub.add_on_connection_blocked_callback(lambda _c, _m: events.append("blocked"))
    ch = pub.channel()
    # Transient messages queue behind the paged tail whole (persistent ones would be paged as
    # small journal references): 6 MiB of them fill a 4 MiB run and write it out.
    # Stop once blocked: a blocked connection is not read, so more would fill the socket.
    for i in range(6000):
        ch.basic_publish("", "dq", b"n%05d" % i + body)
        if i % 20 == 0:
            pub.process_data_events(0)
            if "blocked" in events:
                break

    def pub_saw_blocked() -> bool:
        pub.process_data_events(0.01)
        return "blocked" in events

    wait_until(pub_saw_blocked)
    assert "disk" in b2.call(lambda: b2.broker.alarms)
    reasons = [i.blocked_reason for i in b2.call(b2.server.connections) if i.blocked_reason]
    assert reasons
    assert "page file write failed" in reasons[0]
    b2.stop()  # closes the blocked connection from the broker's side

    def pub_closed() -> bool:
        if not pub.is_closed:
            with contextlib.suppress(pika.exceptions.AMQPError):
                pub.process_data_events(0.01)
        return bool(pub.is_closed)

    wait_until(pub_closed)


def test_a_journal_segment_that_cannot_be_created_nacks_and_alarms(
    broker_factory: BrokerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the first persistent publish creates the journal's first segment; with no descriptor
    # left (EMFILE) that used to close the connection with 541 and a traceback
    b = broker_factory(data_dir=tmp_path / "data")
    refused: list[Path] = []
    real_open_segment = journal.open_segment

    def no_descriptor(path: Path, flags: int) -> int:
        refused.append(path)
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    events: list[str] = []
    pub = connect(b)
    pub.add_on_connection_blocked_callback(lambda _c, _m: events.append("blocked"))
    pub.add_on_connection_unblocked_callback(lambda _c, _m: events.append("unblocked"))
    ch = pub.channel()
    ch.queue_declare("dq", durable=True)
    ch.confirm_delivery()
    monkeypatch.setattr(journal, "open_segment", no_descriptor)
    assert not publish_confirmed(ch, b"n1")  # nacked, the connection and channel stay open
    assert refused
    assert ch.is_open

    def pub_saw(what: str) -> bool:
        pub.process_data_events(0.01)
        return what in events

    assert not publish_confirmed(ch, b"n2")  # alarm on: nacked at once and blocked
    wait_until(lambda: pub_saw("blocked"))
    assert "disk_write" in b.call(lambda: b.broker.alarms)
    (info,) = b.call(b.server.connections)
    assert info.blocked_reason is not None
    assert "Too many open files" in info.blocked_reason
    monkeypatch.setattr(journal, "open_segment", real_open_segment)
    wait_until(lambda: pub_saw("unblocked"))  # the periodic probe created the segment
    assert publish_confirmed(ch, b"after")
    pub.close()
