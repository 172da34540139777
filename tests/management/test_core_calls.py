"""The management facade (`CoreAdmin`) over the core owners: reads, declares, deletes,
policies, effects."""

from __future__ import annotations

import pytest

from ringmq.adapters.amqp091 import as_frames
from ringmq.amqp import spec
from ringmq.amqp.properties import BasicProperties
from ringmq.core.admin import Declarations
from ringmq.core.broker import Broker
from ringmq.core.effects import CloseConnection, Deliver, Reply, ReplyContent
from ringmq.core.errors import BrokerError, Condition
from ringmq.management.admin import CoreAdmin
from ringmq.management.records import BindingInfo, PermissionInfo, PolicyInfo, UserInfo
from tests.unit.adapters.amqp091.kit import Kit, bodies

from .conftest import FakeRuntime


def facade(broker: Broker) -> tuple[CoreAdmin, FakeRuntime]:
    runtime = FakeRuntime()
    return CoreAdmin(broker, runtime), runtime


def binding(source: str, destination: str, routing_key: str = "") -> BindingInfo:
    return BindingInfo("/", source, destination, "queue", routing_key, {})


def test_declarations_by_name_are_the_core_facade_s_own() -> None:
    # One admin facade: management declares an exchange or a queue with the very methods
    # config loading calls (`Broker.admin`), not with copies of their signatures.
    broker = Kit().broker
    admin, _ = facade(broker)
    for name in ("declare_exchange", "declare_queue"):
        method = getattr(admin, name)
        assert method.__self__ is broker.admin
        assert method.__func__ is getattr(Declarations, name)
    assert not hasattr(broker, "declare_queue")  # the owner's step is Topology.create_queue


def test_declare_list_and_snapshot_queues() -> None:
    kit = Kit()
    admin, _ = facade(kit.broker)
    assert admin.declare_queue("/", "q", durable=True, arguments={"x-max-length": 5}, now_ms=0)
    assert not admin.declare_queue("/", "q", durable=True, arguments={"x-max-length": 5})
    with pytest.raises(BrokerError) as exc:
        admin.declare_queue("/", "q", durable=True, arguments={"x-max-length": 6})
    assert exc.value.condition is Condition.PRECONDITION_FAILED
    kit.publish(kit.open(), "q", b"abc")
    info = admin.queue("/", "q")
    assert info.messages_ready == 1
    assert info.message_bytes_ready == 3
    assert info.effective_settings["max_length"] == 5
    assert [q.name for q in admin.queues("/")] == ["q"]
    with pytest.raises(BrokerError) as missing:
        admin.queue("/", "nope")
    assert missing.value.condition is Condition.NOT_FOUND


def test_exchanges_bindings_and_publish() -> None:
    kit = Kit()
    admin, _ = facade(kit.broker)
    admin.declare_queue("/", "q")
    assert admin.declare_exchange("/", "logs", type="fanout", durable=True)
    admin.bind(binding("logs", "q"), now_ms=0)
    listed = [b for b in admin.bindings("/") if b.source == "logs"]
    assert listed == [
        BindingInfo(
            vhost="/",
            source="logs",
            destination="q",
            destination_type="queue",
            routing_key="",
            arguments={},
        )
    ]
    assert admin.publish("/", "logs", "", b"hi", {"content_type": "text/plain"}, now_ms=0)
    assert not admin.publish("/", "amq.direct", "none", b"lost", {}, now_ms=0)
    got = admin.get_messages("/", "q", count=5, ackmode="ack_requeue_true", now_ms=0)
    assert [(m.body, m.properties["content_type"]) for m in got] == [(b"hi", "text/plain")]
    assert admin.queue("/", "q").messages_ready == 1  # requeued
    got = admin.get_messages("/", "q", count=1, ackmode="ack_requeue_false", now_ms=0)
    assert got[0].redelivered is True
    assert admin.queue("/", "q").messages_ready == 0
    with pytest.raises(BrokerError):
        admin.delete_exchange("/", "amq.topic")
    admin.unbind(binding("logs", "q"), now_ms=0)
    admin.delete_exchange("/", "logs", if_unused=True)
    assert "logs" not in [x.name for x in admin.exchanges("/")]


def test_delete_queue_applies_the_cancel_in_a_batch() -> None:
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "q")
    kit.consume(ch, "q", "c")
    admin, runtime = facade(kit.broker)
    assert admin.delete_queue("/", "q", now_ms=0) == 0
    assert [e.frame for e in as_frames(runtime.applied) if isinstance(e, Reply)] == [
        spec.BasicCancel(consumer_tag="c", no_wait=True)
    ]
    assert runtime.batches == 1


def test_policy_changes_apply_to_existing_queues() -> None:
    kit = Kit()
    admin, _ = facade(kit.broker)
    admin.declare_queue("/", "capped")
    ch = kit.open()
    for i in range(5):
        kit.publish(ch, "capped", str(i).encode())
    assert admin.set_policy(
        PolicyInfo(vhost="/", name="cap", pattern="^capped$", definition={"max-length": 2}),
        now_ms=0,
    )
    info = admin.queue("/", "capped")
    assert info.messages_ready == 2  # drop-head applies at once, as RabbitMQ does
    assert info.policy == "cap"
    assert [p.name for p in admin.policies("/")] == ["cap"]
    admin.clear_policy("/", "cap", now_ms=0)
    assert admin.queue("/", "capped").policy is None


def test_users_permissions_sessions_and_consumers() -> None:
    kit = Kit()
    admin, runtime = facade(kit.broker)
    admin.add_user("bob", password="pw", password_hash=None, tags=["monitoring"])
    bob = next(u for u in admin.users() if u.name == "bob")
    assert admin.authenticate("bob", "pw") == UserInfo(
        name="bob", tags=["monitoring"], password_hash=bob.password_hash
    )
    assert admin.authenticate("bob", "bad") is None
    admin.add_vhost("v2")
    admin.set_permissions(PermissionInfo("bob", "v2", ".*", ".*", ".*"))
    assert PermissionInfo(user="bob", vhost="v2", configure=".*", write=".*", read=".*") in (
        admin.permissions()
    )
    ch = kit.channel(kit.connect("bob", "v2"))
    kit.call(ch, spec.BasicQos(prefetch_count=7))
    kit.declare(ch, "work")
    kit.consume(ch, "work", "tag1")
    (chan,) = admin.channels()
    assert (chan.prefetch_count, chan.consumer_count) == (7, 1)
    (cons,) = admin.consumers()
    assert (cons.queue, cons.consumer_tag, cons.prefetch_count) == ("work", "tag1", 7)
    admin.delete_vhost("v2", now_ms=0)
    assert [e for e in runtime.applied if isinstance(e, CloseConnection)]
    assert "v2" not in admin.vhosts()


def test_users_keep_the_loopback_rule() -> None:
    # The core's add_user takes the flag: guest (a loopback user) keeps it when replaced.
    broker = Broker()
    admin, _ = facade(broker)
    admin.add_user("guest", password="other", password_hash=None, tags=[])
    admin.add_user("carol", password="pw", password_hash=None, tags=[])
    assert broker.auth.users["guest"].loopback_only
    assert not broker.auth.users["carol"].loopback_only
    found = admin.authenticate("guest", "other")
    assert found is not None
    assert found.loopback_only


def test_update_queue_and_scheduled_admin_ops() -> None:
    kit = Kit()
    admin, runtime = facade(kit.broker)
    admin.declare_queue("/", "ring", arguments={"x-ring-size": 5})
    assert admin.update_queue("/", "ring", {"x-ring-size": 2}, now_ms=0).ring_size == 2
    ch = kit.open()
    kit.publish(ch, "ring", b"later", props=BasicProperties(headers={"x-delay": 60_000}))
    (sched,) = admin.scheduled("/", "ring")
    assert sched.body == b"later"
    kit.consume(ch, "ring", "c", no_ack=True)
    runtime.applied.clear()
    assert admin.deliver_scheduled_now("/", "ring", None, now_ms=kit.now) == 1
    seen = runtime.applied
    assert bodies([e for e in seen if isinstance(e, ReplyContent | Deliver)]) == [b"later"]


def test_queue_counters_follow_rabbitmq_message_stats() -> None:
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "q")
    for _ in range(3):
        kit.publish(ch, "q")
    kit.call(ch, spec.BasicGet(queue="q", no_ack=True))
    kit.call(ch, spec.BasicGet(queue="q"))
    kit.consume(ch, "q", "c")
    kit.call(ch, spec.BasicGet(queue="q"))
    counters = facade(kit.broker)[0].queue("/", "q").counters
    assert (counters.publish, counters.get_no_ack, counters.get) == (3, 1, 1)
    assert (counters.deliver, counters.get_empty) == (1, 1)


def test_an_amqp_1_0_message_is_shown_with_its_0_9_1_body_and_properties() -> None:
    from ringmq.adapters.amqp10.message import build as build_10
    from ringmq.amqp10.sections import DATA, Message10, Properties, encode_message

    kit = Kit()
    admin, _ = facade(kit.broker)
    admin.declare_queue("/", "q10")
    payload = encode_message(
        Message10(properties=Properties(message_id="m-1"), body=((DATA, b"payload"),))
    )
    msg = build_10(payload, exchange="", routing_key="q10", now_ms=0)
    b = kit.broker
    vh = b.exchanges.vhost("/")
    with b.call(0):
        b.publisher.publish_without_session(msg, vhost=vh, exchange=vh.exchanges[""], now_ms=0)
    (got,) = admin.get_messages("/", "q10", count=1, ackmode="ack_requeue_true", now_ms=0)
    assert got.body == b"payload"
    assert got.properties["message_id"] == "m-1"


def test_the_streams_wire_carries_an_amqp_1_0_message_as_its_0_9_1_conversion() -> None:
    # Spark's range reads and browses (both wire formats) read 0-9-1 properties and bodies
    from ringmq.adapters.amqp10.message import build as build_10
    from ringmq.amqp.properties import decode_properties
    from ringmq.amqp10.sections import DATA, Message10, Properties, encode_message
    from ringmq.core.queue.columns import Columns
    from ringmq.management.streamwire import encode_record

    payload = encode_message(
        Message10(properties=Properties(message_id="m-2"), body=((DATA, b"row"),))
    )
    msg = build_10(payload, exchange="", routing_key="q", now_ms=0)
    cols = Columns()
    cols.add_message(1, False, msg)
    assert cols.bodies == [b"row"]
    assert decode_properties(cols.properties.values()[0]).message_id == "m-2"
    parts: list[bytes] = []
    encode_record(1, 1, False, msg, parts)
    assert parts[-1] == b"row"
    assert decode_properties(parts[-2]).message_id == "m-2"
