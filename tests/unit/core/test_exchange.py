"""Exchange records: idempotent bindings, unbind by destination, delayed hold, equivalence."""

from __future__ import annotations

from ringmq.core.exchange import Exchange
from ringmq.core.message import Message
from ringmq.core.routing import ExchangeType


def test_bind_is_idempotent_and_unbind_dest_removes_all() -> None:
    x = Exchange("x", ExchangeType.DIRECT)
    assert x.bind(("q", "a"), "k", None)
    assert not x.bind(("q", "a"), "k", {})
    assert x.bind(("q", "a"), "k2", None)
    assert x.route("k2", None) == [("q", "a")]
    assert x.unbind_dest(("q", "a")) == 2
    assert x.route("k", None) == []
    assert not x.unbind(("q", "a"), "k", None)


def test_delayed_exchange_releases_in_due_then_arrival_order() -> None:
    x = Exchange(
        "d",
        ExchangeType.DELAYED,
        arguments={"x-delayed-type": "topic"},
        routing_type=ExchangeType.TOPIC,
    )
    msgs = [Message("d", "k", b"\x00\x00", bytes([i])) for i in range(3)]
    assert [x.hold(msgs[0], 200), x.hold(msgs[1], 100), x.hold(msgs[2], 100)] == [1, 2, 3]
    assert x.next_due_ms() == 100
    assert x.take_due(99) == []
    assert x.take_due(150) == [(2, msgs[1]), (3, msgs[2])]
    assert x.held_count == 1
    assert x.take_due(1_000) == [(1, msgs[0])]
    assert x.next_due_ms() is None
    x.bind(("q", "a"), "a.#", None)
    assert x.route("a.b", None) == [("q", "a")]


def test_equivalence_reports_first_difference() -> None:
    x = Exchange("x", ExchangeType.FANOUT, durable=True, arguments={"alternate-exchange": "ae"})
    assert (
        x.equivalent(ExchangeType.FANOUT, True, False, False, {"alternate-exchange": "ae"}) is None
    )
    assert x.equivalent(ExchangeType.DIRECT, True, False, False, {}) == "type"
    assert x.equivalent(ExchangeType.FANOUT, False, False, False, {}) == "durable"
    assert x.equivalent(ExchangeType.FANOUT, True, False, False, {}) == "alternate-exchange"
    assert x.alternate_exchange == "ae"
