"""Memory and disk alarms: publishers get connection.blocked, consumers keep running."""

from __future__ import annotations

import pika
import pytest

from ringmq.server.memory import MemoryLimits
from tests.integration.conftest import BrokerFactory, wait_until

pytestmark = pytest.mark.integration


def params(port: int) -> pika.ConnectionParameters:
    return pika.ConnectionParameters("127.0.0.1", port, heartbeat=0)


def test_tiny_watermark_blocks_publishers_until_raised(broker_factory: BrokerFactory) -> None:
    # an absolute watermark of 1 MiB: the interpreter alone is above it
    b = broker_factory(memory=MemoryLimits(high_watermark=1024 * 1024, interval_s=0.05))
    events: list[str] = []
    with (
        pika.BlockingConnection(params(b.port)) as pub,
        pika.BlockingConnection(params(b.port)) as sub,
    ):
        pub.add_on_connection_blocked_callback(lambda _c, _m: events.append("blocked"))
        pub.add_on_connection_unblocked_callback(lambda _c, _m: events.append("unblocked"))
        sub_events: list[str] = []
        sub.add_on_connection_blocked_callback(lambda _c, _m: sub_events.append("blocked"))
        sch = sub.channel()
        sch.queue_declare("work")
        ch = pub.channel()
        ch.basic_publish("", "work", b"first")  # read before the block: accepted

        def pub_saw(what: str) -> bool:
            pub.process_data_events(0.01)
            return what in events

        wait_until(lambda: pub_saw("blocked"))
        # which connection is blocked, and why, is visible (management reads this)
        infos = {i.conn_id: i for i in b.call(b.server.connections)}
        blocked = [i for i in infos.values() if i.state == "blocked"]
        assert len(blocked) == 1
        assert blocked[0].blocked_reason is not None
        assert blocked[0].blocked_reason.startswith("memory alarm")
        # the consumer connection keeps running and gets the message
        _m, _, body = sch.basic_get("work", auto_ack=True)
        assert body == b"first"
        sub.process_data_events(0.05)
        assert sub_events == []

        b.call(lambda: b.server.memory.set_watermark(0.9))  # type: ignore[union-attr]
        wait_until(lambda: pub_saw("unblocked"))
        assert events == ["blocked", "unblocked"]
        ch.basic_publish("", "work", b"second")
        wait_until(lambda: sch.queue_declare("work", passive=True).method.message_count == 1)


def test_free_disk_limit_blocks_publishers(broker_factory: BrokerFactory) -> None:
    b = broker_factory(memory=MemoryLimits(disk_free_limit=1 << 60, interval_s=0.05))
    events: list[str] = []
    with pika.BlockingConnection(params(b.port)) as pub:
        pub.add_on_connection_blocked_callback(lambda _c, _m: events.append("blocked"))
        ch = pub.channel()
        ch.queue_declare("d")
        ch.basic_publish("", "d", b"x")

        def seen() -> bool:
            pub.process_data_events(0.01)
            return "blocked" in events

        wait_until(seen)
        (info,) = b.call(b.server.connections)
        assert (info.blocked_reason or "").startswith("disk alarm")
        assert b.call(lambda: b.broker.alarms).keys() == {"disk"}
        pub.add_on_connection_unblocked_callback(lambda _c, _m: events.append("unblocked"))
        b.call(lambda: b.server.memory.set_disk_free_limit(0))  # type: ignore[union-attr]

        def cleared() -> bool:
            pub.process_data_events(0.01)
            return "unblocked" in events

        wait_until(cleared)
        assert b.call(lambda: b.broker.alarms) == {}
