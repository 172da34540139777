"""Binding tables: topic matching against a recursive model, headers x-match rules, counts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringmq.core.routing import (
    DirectTable,
    FanoutTable,
    HeadersTable,
    TopicTable,
    parse_x_match,
)
from tests.unit.core.corekit import Core


def _model_match(pattern: list[str], words: list[str]) -> bool:
    if not pattern:
        return not words
    head = pattern[0]
    if head == "#":
        return _model_match(pattern[1:], words) or (
            bool(words) and _model_match(pattern, words[1:])
        )
    if not words:
        return False
    return (head in ("*", words[0])) and _model_match(pattern[1:], words[1:])


_word = st.sampled_from(["a", "b", "c", ""])
_pattern_word = st.sampled_from(["a", "b", "c", "*", "#"])


@given(
    patterns=st.lists(st.lists(_pattern_word, min_size=1, max_size=5), min_size=1, max_size=6),
    key=st.lists(_word, min_size=1, max_size=6),
)
def test_topic_table_agrees_with_model(patterns: list[list[str]], key: list[str]) -> None:
    table = TopicTable()
    for i, p in enumerate(patterns):
        table.add(("q", f"q{i}"), ".".join(p), {})
    got = set(table.route(".".join(key), None))
    want = {
        ("q", f"q{i}") for i, p in enumerate(patterns) if _model_match(p, ".".join(key).split("."))
    }
    assert got == want


@pytest.mark.parametrize(
    ("pattern", "key", "hit"),
    [
        ("a.*", "a.b", True),
        ("a.*", "a", False),
        ("a.#", "a", True),
        ("#", "anything.at.all", True),
        ("#.c", "a.b.c", True),
        ("a.#.c", "a.c", True),
        ("a.#.c", "a.b.b.c", True),
        ("*.b.*", "a.b", False),
        ("stock.usd.*", "stock.usd.nyse", True),
    ],
)
def test_topic_examples(pattern: str, key: str, hit: bool) -> None:
    table = TopicTable()
    table.add(("q", "x"), pattern, {})
    assert (table.route(key, None) == [("q", "x")]) is hit


def test_topic_remove_prunes_and_counts_duplicates() -> None:
    table = TopicTable()
    table.add(("q", "x"), "a.*", {})
    table.add(("q", "x"), "a.#", {})
    assert table.route("a.b", None) == [("q", "x")]  # routed once
    table.remove(("q", "x"), "a.*", {})
    assert table.route("a.b", None) == [("q", "x")]
    table.remove(("q", "x"), "a.#", {})
    assert table.route("a.b", None) == []


def test_direct_and_fanout_count_bindings() -> None:
    direct = DirectTable()
    direct.add(("q", "a"), "k", {})
    direct.add(("q", "b"), "k", {})
    assert direct.route("k", None) == [("q", "a"), ("q", "b")]
    direct.remove(("q", "a"), "k", {})
    assert direct.route("k", None) == [("q", "b")]
    fan = FanoutTable()
    fan.add(("q", "a"), "k1", {})
    fan.add(("q", "a"), "k2", {})
    fan.remove(("q", "a"), "k1", {})
    assert fan.route("", None) == [("q", "a")]


@pytest.mark.parametrize(
    ("args", "headers", "hit"),
    [
        ({"x-match": "all", "a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}, True),
        ({"x-match": "all", "a": 1, "b": 2}, {"a": 1}, False),
        ({"x-match": "any", "a": 1, "b": 2}, {"b": 2}, True),
        ({"x-match": "any", "a": 1}, {"a": 2}, False),
        ({"a": 1}, {"a": 1}, True),  # default is all
        ({"x-match": "all", "a": None}, {"a": "anything"}, True),  # void: presence only
        ({"x-match": "all", "x-k": 1}, {}, True),  # x- keys ignored, nothing to compare
        ({"x-match": "any", "x-k": 1}, {"x-k": 1}, False),
        ({"x-match": "any-with-x", "x-k": 1}, {"x-k": 1}, True),
        ({"x-match": "all-with-x", "x-k": 1, "a": 1}, {"a": 1}, False),
    ],
)
def test_headers_matching(args: dict[str, object], headers: dict[str, object], hit: bool) -> None:
    table = HeadersTable()
    table.add(("q", "h"), "", args)
    assert (table.route("", headers) == [("q", "h")]) is hit


def test_bad_x_match_is_refused() -> None:
    with pytest.raises(ValueError, match="x-match"):
        parse_x_match({"x-match": "some"})


_ops = st.lists(
    st.tuples(
        st.sampled_from(["bind", "unbind", "publish", "delete_queue"]),
        st.sampled_from(["q0", "q1", "q2"]),
        st.sampled_from(["a.b", "a.*", "#", "a.#", "*.b", "c"]),
        st.sampled_from(["a.b", "a", "c", "a.b.c", "x.b"]),
    ),
    max_size=30,
)


@given(ops=_ops)
def test_route_cache_follows_binding_changes(ops: list[tuple[str, str, str, str]]) -> None:
    """Publishes through the broker's cached routes agree with a fresh match every time."""
    kit = Core()
    ch = kit.open()
    bound: set[tuple[str, str]] = set()
    expected: dict[str, int] = {}
    for q in ("q0", "q1", "q2"):
        kit.declare(ch, q)
        expected[q] = 0
    for op, q, pattern, key in ops:
        if op == "bind":
            if q not in expected:
                kit.declare(ch, q)
                expected[q] = 0
            kit.bind(ch, q, "amq.topic", pattern)
            bound.add((q, pattern))
        elif op == "unbind" and q in expected:
            kit.unbind(ch, q, "amq.topic", pattern)
            bound.discard((q, pattern))
        elif op == "delete_queue" and q in expected:
            kit.delete(ch, q)
            del expected[q]
            bound = {b for b in bound if b[0] != q}
        elif op == "publish":
            kit.publish(ch, key, exchange="amq.topic")
            hit = {bq for bq, p in bound if _model_match(p.split("."), key.split("."))}
            for bq in hit:
                expected[bq] += 1
    queues = kit.broker.vhosts["/"].queues
    assert {name: queues[name].queue.ready_count for name in expected} == expected


def test_the_default_exchange_route_cache_follows_queue_changes() -> None:
    """The default exchange's routes are cached per queue name (`VHost.direct`): a deleted
    queue's name routes nowhere, a redeclared one to the new queue."""
    kit = Core()
    ch = kit.open()
    kit.declare(ch, "q")
    kit.publish(ch, "q")
    vh = kit.broker.vhosts["/"]
    old = vh.queues["q"]
    assert vh.direct == {"q": (old,)}
    kit.delete(ch, "q")
    kit.publish(ch, "q")
    assert kit.broker.stats["unroutable"] == 1
    kit.declare(ch, "q")
    kit.publish(ch, "q")
    new = vh.queues["q"]
    assert new is not old
    assert vh.direct == {"q": (new,)}
    assert new.queue.ready_count == 1
    assert kit.broker.stats["unroutable"] == 1
