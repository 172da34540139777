"""CoreAdmin's fast listing path agrees with its full snapshot of one queue."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ringmq.core.broker import Broker
from ringmq.management.admin import CoreAdmin, settings_arguments
from ringmq.management.records import PolicyInfo
from ringmq.storage.bodystore import SpillDirectory

from .conftest import T0_MS, FakeRuntime, open_consumer


def test_listing_matches_single_queue_snapshot(broker: Broker) -> None:
    admin = CoreAdmin(broker, FakeRuntime())
    admin.declare_queue("/", "ring", arguments={"x-ring-size": 2}, now_ms=T0_MS)
    admin.declare_queue("/", "lvq", arguments={"x-last-value-key": "k"}, now_ms=T0_MS)
    admin.declare_queue("/", "plain", now_ms=T0_MS)
    admin.set_policy(
        PolicyInfo(vhost="/", name="ttl", pattern="^plain$", definition={"message-ttl": 60_000}),
        now_ms=T0_MS,
    )
    for i in range(5):
        admin.publish("/", "", "ring", b"r", {}, now_ms=T0_MS)
        admin.publish("/", "", "lvq", b"l", {"headers": {"k": str(i % 2)}}, now_ms=T0_MS)
        admin.publish(
            "/", "", "plain", b"p" * i, {"headers": {"x-delay": 10_000 * (i % 2)}}, now_ms=T0_MS
        )
    open_consumer(broker, "plain", prefetch=1)
    admin.get_messages("/", "ring", count=1, ackmode="ack_requeue_false", now_ms=T0_MS)
    listed = {q.name: q for q in admin.queues()}
    assert set(listed) == {"ring", "lvq", "plain"}
    for name, fast in listed.items():
        full = admin.queue("/", name)
        assert replace(fast, head_message_timestamp_ms=None) == replace(
            full, head_message_timestamp_ms=None
        ), name
    assert listed["plain"].policy == "ttl"
    assert listed["plain"].effective_settings["sources"]["message_ttl_ms"] == "policy"
    assert listed["plain"].messages_scheduled == 2
    assert listed["plain"].messages_unacknowledged == 1
    assert listed["ring"].counters.ack == 1  # the management get took it
    assert listed["lvq"].counters.lvq_replaced == 3


def test_records_of_a_paged_queue_read_its_counters_and_page_nothing_in(
    broker: Broker, tmp_path: Path
) -> None:
    # A queue's page (one record, with the head message's timestamp) and the listing must
    # leave the paged tail where it is: the console polls the page every few seconds. A head
    # of one message: once a consumer takes it, the next one is the spill's front.
    broker.enable_paging(SpillDirectory(tmp_path / "paging"), 1, 1 << 20)
    admin = CoreAdmin(broker, FakeRuntime())
    admin.declare_queue("/", "deep", now_ms=T0_MS)
    body = b"x" * 65536
    for i in range(100):
        admin.publish("/", "", "deep", body, {}, now_ms=T0_MS + i)
    engine = broker.vhosts["/"].queues["deep"].queue
    c = engine.counters
    assert (c.ready, c.paged) == (1, 99)
    buffered, buffered_bytes = engine.paged_in_memory  # still on their way to the page file
    assert 0 < buffered < 99
    for record in (admin.queue("/", "deep"), *admin.queues("/")):
        assert (c.ready, c.paged, engine.spilled) == (1, 99, 99)  # nothing paged in
        assert record.messages_ready == 100
        assert record.messages_paged == 99 - buffered
        assert record.message_bytes_paged == 99 * 65536 - buffered_bytes
        assert record.messages - record.messages_paged == 1 + buffered
    assert admin.queue("/", "deep").head_message_timestamp_ms == T0_MS
    open_consumer(broker, "deep", prefetch=1)
    assert (c.ready, c.unacked, c.paged) == (0, 1, 99)
    # nothing ready in memory: the head is the spill's front, read where it lies
    assert admin.queue("/", "deep").head_message_timestamp_ms == T0_MS + 1
    assert (c.ready, c.paged, engine.spilled) == (0, 99, 99)


def test_settings_names_map_to_queue_arguments() -> None:
    assert settings_arguments(
        {"ring-size": 3, "max_length": 5, "x-expires": 1, "qpid.max_count": 2}
    ) == {
        "x-ring-size": 3,
        "x-max-length": 5,
        "x-expires": 1,
        "qpid.max_count": 2,
    }
