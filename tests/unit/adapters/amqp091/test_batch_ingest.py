"""Bulk ingest (core/ingest.py) behind the 0-9-1 adapter's batch (`Amqp091.publish_batch`: raw
property lists, as columns where `columns_of` reads them): a batch's runs to one paged plain
queue, in one step, with the outcome of one basic.publish per message. The core's own batch
of messages is tested in tests/unit/core/test_ingest.py."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.core import ingest
from ringmq.core.broker import Broker
from ringmq.core.effects import Effect
from ringmq.core.entities import NoLocal
from ringmq.core.queue.ports import MemorySpillStore
from tests.unit.adapters.amqp091.kit import Kit
from tests.unit.adapters.amqp091.test_publish_batch import _acks

_WINDOW = {"x-message-deduplication-window-ms": 60_000}
_QUEUES: dict[str, dict[str, Any]] = {
    "sink": dict(_WINDOW),  # durable, de-duplicating: a Spark sink
    "plain": {},
    "ttl": {"x-message-ttl": 60_000},  # an option: never a run
}
_HEAD = 3  # in-memory bound: the queues page from the 4th message on


def _setup(journal: list[tuple[str, str, int]]) -> tuple[Kit, tuple[int, int]]:
    kit = Kit()
    kit.broker.enable_paging(lambda _vh, _q: MemorySpillStore(), _HEAD, 1 << 20)
    ch = kit.open()
    for name, args in _QUEUES.items():
        kit.declare(ch, name, durable=name == "sink", arguments=args)
    kit.declare(ch, "other", arguments=_WINDOW)
    kit.call(ch, spec.QueueBind(queue="sink", exchange="amq.fanout"))
    kit.call(ch, spec.QueueBind(queue="other", exchange="amq.fanout"))
    kit.call(ch, spec.ConfirmSelect())
    kit.broker.state.dedup.journal = lambda key, mid, at: journal.append((key, mid, at))
    return kit, ch


def _contents(broker: Broker) -> dict[str, list[tuple[bytes, str | None]]]:
    out: dict[str, list[tuple[bytes, str | None]]] = {}
    for name, q in broker.vhosts["/"].queues.items():
        got = []
        while (d := q.queue.fetch(0, ack_required=False)) is not None:
            got.append((bytes(d.message.body), d.message.message_id))
        out[name] = got
    return out


_message = st.tuples(
    st.sampled_from(["sink"] * 12 + ["plain", "ttl", "nowhere"]),
    st.none() | st.sampled_from(["a", "b", "c", "d", "e"]),  # message_id
    st.sampled_from([None] * 6 + [2]),  # delivery_mode
    st.sampled_from([False] * 12 + [True]),  # headers
)


def _encode(i: int, m: tuple[str, str | None, int | None, bool]) -> tuple[str, bytes, bytes]:
    rk, mid, mode, headers = m
    props = BasicProperties(
        message_id=mid, delivery_mode=mode, headers={"n": i} if headers else None
    )
    return rk, encode_properties(props), f"m{i}".encode()


def _runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    # the lengths of the runs the bulk step took (as messages or as columns)
    taken: list[int] = []
    for name in ("ingest_run", "ingest_columns"):
        real = getattr(ingest, name)

        def spy(*args: Any, real: Any = real) -> bool:
            ok = bool(real(*args))
            if ok:
                taken.append(len(args[4]))
            return ok

        monkeypatch.setattr(f"ringmq.core.publishbatch.{name}", spy)
    return taken


@settings(max_examples=60, deadline=None)
@given(
    st.lists(_message, max_size=60),
    st.integers(0, 12),  # messages to `sink` first, so that it pages
    st.sampled_from(["", "amq.fanout"]),
    st.lists(st.integers(1, 30), min_size=1, max_size=6),
)
def test_runs_equal_per_message(
    raw: list[tuple[str, str | None, int | None, bool]], prefix: int, exchange: str, cuts: list[int]
) -> None:
    msgs = [("sink", None, None, False)] * prefix + raw
    messages = [_encode(i, m) for i, m in enumerate(msgs)]
    j1: list[tuple[str, str, int]] = []
    one, ch1 = _setup(j1)
    per: list[Effect] = []
    for rk, pb, body in messages:
        method = spec.BasicPublish(exchange=exchange, routing_key=rk)
        per += one.call(ch1, method, RawContent(60, len(body), pb, body))
    j2: list[tuple[str, str, int]] = []
    two, ch2 = _setup(j2)
    batch: list[Effect] = []
    a = k = 0
    while a < len(messages):
        b = min(len(messages), a + cuts[k % len(cuts)])
        k += 1
        done = two.amqp.publish_batch(ch2[0], ch2[1], exchange, messages, a, b, two.now)
        assert done.error is None
        assert done.published == b - a
        batch += done.effects
        a = b
    assert j1 == j2  # the durable window journals the same ids
    assert _acks(per) == _acks(batch)
    for key in ("published", "nacked", "unroutable"):
        assert one.broker.stats[key] == two.broker.stats[key]
    assert one.broker.state.dedup.ids.duplicates == two.broker.state.dedup.ids.duplicates
    c1, c2 = one.broker.state.by_protocol["amqp091"], two.broker.state.by_protocol["amqp091"]
    assert (c1.received, c1.unroutable) == (c2.received, c2.unroutable)
    assert _contents(one.broker) == _contents(two.broker)


def test_a_paged_sink_takes_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = _runs(monkeypatch)
    journal: list[tuple[str, str, int]] = []
    kit, ch = _setup(journal)
    mid = [encode_properties(BasicProperties(message_id=f"id-{i % 700}")) for i in range(1000)]
    messages = [("sink", mid[i], f"m{i}".encode()) for i in range(1000)]
    done = kit.amqp.publish_batch(ch[0], ch[1], "", messages, 0, 1000, kit.now)
    assert done.error is None
    assert done.published == 1000
    # The first run fills the head and pages one at a time; the rest goes as one run of
    # columns.
    assert taken == [744]
    assert _acks(done.effects) == (set(range(1, 1001)), set())
    got = _contents(kit.broker)["sink"]
    assert got == [(f"m{i}".encode(), f"id-{i}") for i in range(700)]  # replays dropped
    assert len(journal) == 700
    assert kit.broker.state.dedup.ids.duplicates == 300


def test_anything_unusual_goes_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = _runs(monkeypatch)
    kit, ch = _setup([])
    plain = encode_properties(BasicProperties())
    persistent = encode_properties(BasicProperties(delivery_mode=2))
    fill = [("sink", plain, b"f")] * 300
    kit.amqp.publish_batch(ch[0], ch[1], "", fill, 0, 300, kit.now)
    assert taken == [44]  # the run after the first is taken: the queue pages
    taken.clear()
    cases: list[tuple[str, list[tuple[str, bytes, bytes]]]] = [
        ("", [("sink", persistent, b"p")] * 300),  # persistent to a durable queue: journaled
        ("", [("sink", plain, b"x"), ("plain", plain, b"y")] * 150),  # two routing keys
        ("amq.fanout", [("", plain, b"z")] * 300),  # two queues
        ("", [("ttl", plain, b"t")] * 300),  # a queue with an option
    ]
    for exchange, batch in cases:
        done = kit.amqp.publish_batch(ch[0], ch[1], exchange, batch, 0, len(batch), kit.now)
        assert done.error is None
        assert done.published == len(batch)
    assert taken == []
    # A no-local consumer's queue takes nothing its own connection publishes.
    sink = kit.broker.vhosts["/"].queues["sink"]
    before = sink.queue.counters.paged + sink.queue.counters.ready
    sink.no_local = NoLocal(ch[0], None, kit.broker.state.conns)  # the connection's rule
    done = kit.amqp.publish_batch(ch[0], ch[1], "", fill, 0, 300, kit.now)
    assert done.published == 300
    assert taken == []
    assert sink.queue.counters.paged + sink.queue.counters.ready == before
