"""CoreAdmin's fast listing path agrees with its full snapshot of one queue."""

from __future__ import annotations

from dataclasses import replace

from ringmq.core.broker import Broker
from ringmq.management.admin import CoreAdmin, settings_arguments
from ringmq.management.records import PolicyInfo

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


def test_settings_names_map_to_queue_arguments() -> None:
    assert settings_arguments(
        {"ring-size": 3, "max_length": 5, "x-expires": 1, "qpid.max_count": 2}
    ) == {
        "x-ring-size": 3,
        "x-max-length": 5,
        "x-expires": 1,
        "qpid.max_count": 2,
    }
