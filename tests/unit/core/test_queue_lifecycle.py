"""Queues on the core's API: declare (passive, reserved and server-made names, the last
declared name, equivalence, arguments, queue types), exclusive and auto-delete queues, x-expires,
delete and purge."""

from __future__ import annotations

from ringmq.core.config import BrokerConfig
from ringmq.core.effects import CancelConsumer
from ringmq.core.errors import Condition
from tests.unit.core.corekit import Core


def test_queue_declare_passive_and_reserved_names() -> None:
    core = Core()
    topology = core.broker.topology
    err = core.refused(topology.declare_queue_passive, core.open(), "nope", core.now)
    assert err.condition is Condition.NOT_FOUND
    assert err.text == "NOT_FOUND - no queue 'nope' in vhost '/'"
    err = core.refused(core.declare, core.open(), "amq.mine")
    assert err.condition is Condition.ACCESS_REFUSED
    assert "reserved prefix 'amq.*'" in err.explanation


def test_server_named_queues_are_deterministic_with_a_seed() -> None:
    def names() -> list[str]:
        core = Core(BrokerConfig(name_seed=42))
        s = core.open()
        return [core.declare(s, "").name for _ in range(3)]

    first = names()
    assert first == names()
    assert all(n.startswith("amq.gen-") for n in first)
    assert len(set(first)) == 3


def test_redeclare_with_different_arguments_is_refused_as_inequivalent() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "q", {"x-max-length": 10})
    core.declare(s, "q", {"x-max-length": 10})  # equivalent: fine
    err = core.refused(core.declare, s, "q", {"x-max-length": 20})
    assert err.condition is Condition.PRECONDITION_FAILED
    assert err.explanation == (
        "inequivalent arg 'x-max-length' for queue 'q' in vhost '/': received the value '20' "
        "of type 'signedint' but current is the value '10' of type 'signedint'"
    )
    err = core.refused(core.declare, core.open(), "q", {"x-max-length": 10}, durable=True)
    assert "inequivalent arg 'durable'" in err.explanation
    err = core.refused(core.declare, core.open(), "q")
    assert "received none but current is the value '10'" in err.explanation


def test_invalid_queue_argument_is_a_failed_precondition() -> None:
    core = Core()
    err = core.refused(core.declare, core.open(), "q", {"x-max-length": -1})
    assert err.condition is Condition.PRECONDITION_FAILED


def test_exclusive_queue_is_locked_for_other_connections_and_goes_with_its_owner() -> None:
    core = Core()
    b = core.broker
    owner = core.open()
    core.declare(owner, "ex", exclusive=True)
    attempts = (
        lambda s: core.declare(s, "ex", exclusive=True),
        lambda s: b.topology.declare_queue_passive(s, "ex", core.now),
        lambda s: core.consume(s, "ex", "c"),
        lambda s: b.delivery.get(s, "ex", no_ack=False, now_ms=core.now),
        lambda s: b.topology.purge_for(s, "ex"),
    )
    for attempt in attempts:
        assert core.refused(attempt, core.open()).condition is Condition.RESOURCE_LOCKED
    b.connection_closed(owner.conn_id, core.now)
    err = core.refused(b.topology.declare_queue_passive, core.open(), "ex", core.now)
    assert err.condition is Condition.NOT_FOUND


def test_auto_delete_queue_goes_when_its_last_consumer_cancels() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "ad", auto_delete=True)
    core.consume(s, "ad", "c1")
    core.consume(s, "ad", "c2")
    core.run(core.broker.delivery.cancel, s, "c1", core.now)
    assert "ad" in core.broker.vhosts["/"].queues
    core.run(core.broker.delivery.cancel, s, "c2", core.now)
    assert "ad" not in core.broker.vhosts["/"].queues


def test_x_expires_deletes_an_unused_queue_on_tick() -> None:
    core = Core()
    core.declare(core.open(), "tmp", {"x-expires": 1000})
    assert core.broker.next_deadline_ms() == core.now + 1000
    core.tick(999)
    assert "tmp" in core.broker.vhosts["/"].queues
    core.tick(1)
    assert "tmp" not in core.broker.vhosts["/"].queues


def test_delete_if_unused_if_empty_and_cancel_notification() -> None:
    core = Core()
    notified = {"capabilities": {"consumer_cancel_notify": True}}
    consumer = core.session(core.connect(properties=notified))
    core.declare(consumer, "q")
    core.consume(consumer, "q", "c")
    err = core.refused(core.delete, consumer, "q", if_unused=True)
    assert err.condition is Condition.PRECONDITION_FAILED
    assert err.explanation == "queue 'q' in vhost '/' in use"
    s = core.open()
    core.declare(s, "full")
    core.publish(s, "full")
    err = core.refused(core.delete, s, "full", if_empty=True)
    assert err.explanation == "queue 'full' in vhost '/' not empty"
    out = core.delete(core.open(), "q")
    cancels = [e for e in out if isinstance(e, CancelConsumer)]
    assert [(c.conn_id, c.channel, c.consumer_tag) for c in cancels] == [
        (consumer.conn_id, consumer.channel, "c")
    ]
    assert core.deleted == 0


def test_purge_reports_count() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "q")
    for _ in range(3):
        core.publish(s, "q")
    with core.broker.call(core.now):
        assert core.broker.topology.purge_for(s, "q") == 3


def test_empty_queue_name_means_last_declared_on_the_session() -> None:
    core = Core()
    s = core.open()
    declared = core.declare(s, "")
    core.bind(s, "", "amq.direct", "k")
    core.publish(s, "k", b"via-last", exchange="amq.direct")
    assert core.queue(declared.name).ready_count == 1
    err = core.refused(core.bind, core.open(), "", "amq.direct")
    assert err.condition is Condition.NOT_FOUND


def test_redeclare_ignores_arguments_without_semantics_like_rabbitmq() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "q", {"x-app-tag": "a"})
    core.declare(s, "q", {"x-app-tag": "b", "x-queue-type": "classic"})
    err = core.refused(core.declare, s, "q", {"x-queue-type": "quorum"})
    assert err.condition is Condition.PRECONDITION_FAILED
    assert "inequivalent arg 'x-queue-type'" in err.explanation


def test_queue_types_ringmq_does_not_implement_are_refused_not_downgraded() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "plain", {"x-queue-type": "classic"})
    core.declare(s, "qq", {"x-queue-type": "quorum"}, durable=True)
    for kind in ("mixed",):
        err = core.refused(core.declare, s, kind, {"x-queue-type": kind})
        assert err.condition is Condition.PRECONDITION_FAILED
        assert f"queue type '{kind}' is not implemented" in err.explanation
        s = core.open()
