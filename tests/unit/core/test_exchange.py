"""Exchange records: idempotent bindings, unbind by destination, delayed hold, equivalence."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

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


_DESTS = [("q", "a"), ("q", "b"), ("x", "a")]
_OPS = st.lists(
    st.tuples(
        st.sampled_from(["bind", "unbind", "unbind_dest"]),
        st.sampled_from(_DESTS),
        st.sampled_from(["k", "k2", "#"]),
    ),
    max_size=40,
)


@given(_OPS)
def test_unbind_dest_removes_exactly_the_bindings_a_scan_finds(ops: list[tuple[str, ...]]) -> None:
    # the index by destination against the scan it replaces
    x = Exchange("x", ExchangeType.TOPIC)
    for op, dest, key in ops:
        d = (dest[0], dest[1])
        if op == "bind":
            x.bind(d, key, None)
        elif op == "unbind":
            x.unbind(d, key, None)
        else:
            expected = sum(1 for b in x.bindings.values() if b.dest == d)
            assert x.unbind_dest(d) == expected
            assert all(b.dest != d for b in x.bindings.values())
    for d in _DESTS:
        left = {b.routing_key for b in x.bindings.values() if b.dest == d}
        # the routing table lost what the index lost: "k" reaches `d` by "k" or "#"
        assert (d in x.route("k", None)) == bool(left & {"k", "#"})
        assert x.unbind_dest(d) == len(left)
    assert x.bindings == {}


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
