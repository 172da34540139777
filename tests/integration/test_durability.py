"""Durability through real clients: what survives a broker restart on the same data dir."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Any

import aio_pika
import pika
import pika.exceptions
import pytest

from ringmq.management.records import PermissionInfo, PolicyInfo
from ringmq.node import BrokerThread
from tests.facade import admin_of
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def connect(b: BrokerThread, user: str = "guest", password: str = "guest") -> Any:
    creds = pika.PlainCredentials(user, password)
    return pika.BlockingConnection(
        pika.ConnectionParameters(host=b.host, port=b.port, credentials=creds)
    )


def drain(b: BrokerThread, queue: str) -> list[tuple[bytes, bool]]:
    out: list[tuple[bytes, bool]] = []
    with connect(b) as conn:
        ch = conn.channel()
        while True:
            method, _props, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                return out
            out.append((body, method.redelivered))


def test_persistent_messages_survive_and_transient_ones_do_not(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "d"
    b = broker_factory(data_dir=data)
    with connect(b) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("durable-q", durable=True)
        ch.queue_declare("transient-q", durable=False)
        for i in range(50):
            ch.basic_publish("", "durable-q", b"p%d" % i, PERSISTENT)
            ch.basic_publish("", "durable-q", b"t%d" % i)
            ch.basic_publish("", "transient-q", b"x%d" % i, PERSISTENT)
    b.stop()
    b2 = broker_factory(data_dir=data)
    assert drain(b2, "durable-q") == [(b"p%d" % i, False) for i in range(50)]
    with connect(b2) as conn, pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        conn.channel().queue_declare("transient-q", passive=True)
    assert exc.value.reply_code == 404


def test_acked_messages_stay_gone_and_unacked_come_back_redelivered(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "d"
    b = broker_factory(data_dir=data)
    conn = connect(b)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("work", durable=True)
    for i in range(10):
        ch.basic_publish("", "work", b"%d" % i, PERSISTENT)
    acked = []
    for _ in range(4):
        method, _p, body = ch.basic_get("work", auto_ack=False)
        acked.append(body)
        ch.basic_ack(method.delivery_tag)
    method, _p, held = ch.basic_get("work", auto_ack=False)  # unacked at shutdown
    assert held == b"4"
    conn.process_data_events(0.05)  # the acks reach the broker before it stops
    b.stop()
    with contextlib.suppress(pika.exceptions.AMQPError):
        conn.close()
    b2 = broker_factory(data_dir=data)
    got = drain(b2, "work")
    assert got[0] == (b"4", True)
    assert got[1:] == [(b"%d" % i, False) for i in range(5, 10)]
    assert acked == [b"0", b"1", b"2", b"3"]


def test_definitions_survive_a_restart(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    data = tmp_path / "d"
    b = broker_factory(data_dir=data)
    with connect(b) as conn:
        ch = conn.channel()
        ch.exchange_declare("events", "topic", durable=True)
        ch.exchange_declare("scratch", "fanout", durable=False)
        ch.queue_declare("audit", durable=True, arguments={"x-message-ttl": 600_000})
        ch.queue_bind("audit", "events", "order.*")
    admin = admin_of(b)
    b.call(lambda: admin.add_user("ops", password="pw", password_hash=None, tags=["administrator"]))
    b.call(lambda: admin.set_permissions(PermissionInfo("ops", "/", ".*", ".*", ".*")))
    b.call(
        lambda: admin.set_policy(
            PolicyInfo(vhost="/", name="cap", pattern="^audit$", definition={"max-length": 2}),
            now_ms=0,
        )
    )
    b.stop()
    b2 = broker_factory(data_dir=data)
    with connect(b2, "ops", "pw") as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare("events", "topic", durable=True, passive=True)
        ch.queue_declare("audit", durable=True, arguments={"x-message-ttl": 600_000})
        for i in range(5):
            ch.basic_publish("events", "order.new", b"%d" % i, PERSISTENT)
        ch.basic_publish("events", "invoice.new", b"no", PERSISTENT)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.exchange_declare("scratch", "fanout", passive=True)
        assert exc.value.reply_code == 404
    # the binding routes "order.*" only, and the recovered policy's max-length 2 drops the head
    policies = b2.call(lambda: admin_of(b2).policies("/"))
    assert [p.name for p in policies] == ["cap"]
    assert [body for body, _r in drain(b2, "audit")] == [b"3", b"4"]


def test_confirms_wait_for_the_fsync_and_are_grouped(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    b = broker_factory(data_dir=tmp_path / "d")
    commit = b.server.commit
    assert commit is not None
    gate = threading.Event()
    real_sync_files = commit.store.sync_files  # the group commit's fsync of a point

    def gated_sync_files(point: Any) -> None:
        gate.wait(30)
        real_sync_files(point)

    b.call(lambda: setattr(commit.store, "sync_files", gated_sync_files))
    # no periodic sweep: confirms must come from the fsync started at the end of a read batch
    b.call(b.server.timers.stop_sweep)
    url = f"amqp://guest:guest@{b.host}:{b.port}/"

    async def held() -> None:
        connection = await aio_pika.connect(url)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            await channel.declare_queue("gq", durable=True)
            msg = aio_pika.Message(b"held", delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
            confirm = asyncio.ensure_future(channel.default_exchange.publish(msg, "gq"))
            done, _ = await asyncio.wait([confirm], timeout=0.3)
            assert not done  # persistent: no confirm while the fsync has not completed
            gate.set()
            await asyncio.wait_for(confirm, 10)

    try:
        asyncio.run(held())
    finally:
        gate.set()
        b.call(lambda: setattr(commit.store, "sync_files", real_sync_files))

    async def burst() -> None:
        connection = await aio_pika.connect(url)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            exchange = channel.default_exchange
            msgs = [
                aio_pika.Message(b"%d" % i, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
                for i in range(400)
            ]
            await asyncio.gather(*(exchange.publish(m, routing_key="gq") for m in msgs))

    before = b.call(lambda: commit.syncs)
    asyncio.run(burst())
    syncs = b.call(lambda: commit.syncs) - before
    assert 1 <= syncs < 400  # group commit: one fsync covers many confirms
    assert b.call(lambda: admin_of(b).queue("/", "gq").messages_ready) == 401


def test_delayed_exchange_keeps_persistent_held_messages_across_a_restart(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    # RabbitMQ's delayed-message plugin keeps held messages on disk: a durable x-delayed-message
    # exchange's persistent messages come back after a restart and are released when due;
    # transient ones, and those of a deleted exchange, do not.
    data = tmp_path / "d"
    b = broker_factory(data_dir=data)
    with connect(b) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        for name in ("dx", "gone"):
            ch.exchange_declare(
                name, "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"}
            )
            ch.queue_declare(f"{name}-q", durable=True)
            ch.queue_bind(f"{name}-q", name, "k")
        for i in range(3):
            delay = {"x-delay": 300 + 100 * i}
            props = pika.BasicProperties(delivery_mode=2, headers=delay)
            ch.basic_publish("dx", "k", b"p%d" % i, props)
            ch.basic_publish("dx", "k", b"t%d" % i, pika.BasicProperties(headers=delay))
            ch.basic_publish("gone", "k", b"g%d" % i, props)
        ch.exchange_delete("gone")
        assert ch.queue_declare("dx-q", passive=True).method.message_count == 0  # still held
    b.stop()
    b2 = broker_factory(data_dir=data)
    got: list[bytes] = []
    with connect(b2) as conn:
        ch = conn.channel()
        for _ in range(100):  # released on the first tick at or after the due time
            method, _props, body = ch.basic_get("dx-q", auto_ack=True)
            if method is not None:
                got.append(body)
            elif len(got) == 3:
                break
            else:
                conn.sleep(0.05)
        assert ch.queue_declare("gone-q", passive=True).method.message_count == 0
    assert got == [b"p0", b"p1", b"p2"]
    b2.stop()
    b3 = broker_factory(data_dir=data)  # released messages are not held again
    assert drain(b3, "dx-q") == []


def test_a_delay_past_any_date_is_kept_as_never_and_survives_a_restart(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    # x-delay = 2^63 - 1 ms (or an absolute time as far) overflowed the journal's due time:
    # the publish failed with 541 and the message was lost. Due times are bounded (about 146
    # million years): the message is scheduled, confirmed, and still scheduled after a restart.
    data = tmp_path / "d"
    b = broker_factory(data_dir=data)
    far = 2**63 - 1
    with connect(b) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("later", durable=True)
        ch.exchange_declare(
            "dx", "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"}
        )
        ch.queue_declare("held", durable=True)
        ch.queue_bind("held", "dx", "k")
        for headers in ({"x-delay": far}, {"_AMQ_SCHED_DELIVERY": far}):
            props = pika.BasicProperties(delivery_mode=2, headers=headers)
            ch.basic_publish("", "later", b"never", props)
        ch.basic_publish(
            "dx", "k", b"never", pika.BasicProperties(delivery_mode=2, headers={"x-delay": far})
        )
        assert ch.basic_get("later", auto_ack=True)[0] is None  # scheduled, not ready
    b.stop()
    b2 = broker_factory(data_dir=data, http_port=0)
    with connect(b2) as conn:
        ch = conn.channel()
        assert ch.basic_get("later", auto_ack=True)[0] is None
        assert ch.queue_declare("held", passive=True).method.message_count == 0
    queue = b2.call(lambda: b2.broker.vhosts["/"].queues["later"].queue)
    assert b2.call(lambda: queue.counters.scheduled) == 2
