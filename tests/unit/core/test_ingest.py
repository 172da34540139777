"""Bulk ingest (core/ingest.py) on the core's API: a batch of core messages
(`Broker.publish_batch`) takes its runs to one paged plain queue in one step, with the outcome
of one `Publisher.publish` per message. The 0-9-1 adapter's batch (raw property lists, columns)
is tested in tests/unit/adapters/amqp091/test_batch_ingest.py."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.core import ingest
from ringmq.core.broker import Broker
from ringmq.core.effects import Confirm, Effect
from ringmq.core.entities import NoLocal
from ringmq.core.ingest import INGEST_RUN
from ringmq.core.message import Message
from ringmq.core.queue.ports import MemorySpillStore
from ringmq.core.session import Session
from tests.unit.core.corekit import Core, message

_WINDOW = {"x-message-deduplication-window-ms": 60_000}
_QUEUES: dict[str, dict[str, Any]] = {
    "sink": dict(_WINDOW),  # durable, de-duplicating: a Spark sink
    "plain": {},
    "ttl": {"x-message-ttl": 60_000},  # an option: never a run
}
_HEAD = 3  # in-memory bound: the queues page from the 4th message on

Row = tuple[str, str | None, bool, bool]
"""A message to publish: routing key, message id, persistent, with headers."""


def _setup(journal: list[tuple[str, str, int]]) -> tuple[Core, Session]:
    core = Core()
    core.broker.enable_paging(lambda _vh, _q: MemorySpillStore(), _HEAD, 1 << 20)
    s = core.open()
    for name, args in _QUEUES.items():
        core.declare(s, name, args, durable=name == "sink")
    core.declare(s, "other", _WINDOW)
    core.bind(s, "sink", "amq.fanout")
    core.bind(s, "other", "amq.fanout")
    core.broker.confirms.select(s)
    core.broker.state.dedup.journal = lambda key, mid, at: journal.append((key, mid, at))
    return core, s


def _message(core: Core, exchange: str, i: int, row: Row) -> Message:
    rk, mid, persistent, headers = row
    return message(
        rk,
        f"m{i}".encode(),
        exchange=exchange,
        message_id=mid,
        persistent=persistent,
        headers={"n": i} if headers else None,
        timestamp_ms=core.now,
    )


def _acks(effects: list[Effect]) -> tuple[set[int], set[int]]:
    acked: set[int] = set()
    nacked: set[int] = set()
    for e in effects:
        if isinstance(e, Confirm):
            if not e.ok:
                nacked.add(e.seq)
            elif e.multiple:
                acked.update(range(1, e.seq + 1))
            else:
                acked.add(e.seq)
    return acked, nacked


def _contents(broker: Broker) -> dict[str, list[tuple[bytes, str | None]]]:
    out: dict[str, list[tuple[bytes, str | None]]] = {}
    for name, q in broker.vhosts["/"].queues.items():
        got = []
        while (d := q.queue.fetch(0, ack_required=False)) is not None:
            got.append((bytes(d.message.body), d.message.message_id))
        out[name] = got
    return out


def _runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    # the lengths of the runs the bulk step took
    taken: list[int] = []
    real = ingest.ingest_run

    def spy(*args: Any) -> bool:
        ok = bool(real(*args))
        if ok:
            taken.append(len(args[4]))
        return ok

    monkeypatch.setattr("ringmq.core.publishbatch.ingest_run", spy)
    return taken


def _batch(core: Core, s: Session, exchange: str, msgs: list[Message]) -> list[Effect]:
    done = core.broker.publish_batch(s.conn_id, s.channel, exchange, msgs, core.now)
    assert done.error is None
    assert done.published == len(msgs)
    return done.effects


_row = st.tuples(
    st.sampled_from(["sink"] * 12 + ["plain", "ttl", "nowhere"]),
    st.none() | st.sampled_from(["a", "b", "c", "d", "e"]),  # message_id
    st.sampled_from([False] * 6 + [True]),  # persistent
    st.sampled_from([False] * 12 + [True]),  # headers
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(_row, max_size=60),
    st.integers(0, 12),  # messages to `sink` first, so that it pages
    st.sampled_from(["", "amq.fanout"]),
    st.lists(st.integers(1, 30), min_size=1, max_size=6),
)
def test_a_batch_of_core_messages_equals_one_publish_per_message(
    raw: list[Row], prefix: int, exchange: str, cuts: list[int]
) -> None:
    rows: list[Row] = [("sink", None, False, False)] * prefix + raw
    j1: list[tuple[str, str, int]] = []
    one, s1 = _setup(j1)
    per: list[Effect] = []
    for i, row in enumerate(rows):
        msg = _message(one, exchange, i, row)
        per += one.publish(
            s1,
            msg.routing_key,
            msg.body,
            exchange=exchange,
            message_id=msg.message_id,
            persistent=msg.persistent,
            headers=msg.headers,
            timestamp_ms=msg.timestamp_ms,
        )
    j2: list[tuple[str, str, int]] = []
    two, s2 = _setup(j2)
    batch: list[Effect] = []
    a = k = 0
    while a < len(rows):
        b = min(len(rows), a + cuts[k % len(cuts)])
        k += 1
        msgs = [_message(two, exchange, i, rows[i]) for i in range(a, b)]
        batch += _batch(two, s2, exchange, msgs)
        a = b
    assert j1 == j2  # the durable window journals the same ids
    assert _acks(per) == _acks(batch)
    for key in ("published", "nacked", "unroutable"):
        assert one.broker.stats[key] == two.broker.stats[key]
    assert one.broker.state.dedup.ids.duplicates == two.broker.state.dedup.ids.duplicates
    c1, c2 = one.broker.state.by_protocol, two.broker.state.by_protocol
    assert {p: (c.received, c.unroutable) for p, c in c1.items()} == {
        p: (c.received, c.unroutable) for p, c in c2.items()
    }
    assert _contents(one.broker) == _contents(two.broker)


def test_a_paged_sink_takes_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = _runs(monkeypatch)
    journal: list[tuple[str, str, int]] = []
    core, s = _setup(journal)
    msgs = [_message(core, "", i, ("sink", f"id-{i % 700}", False, False)) for i in range(1000)]
    out = _batch(core, s, "", msgs)
    # The first run fills the head and pages one at a time; the rest goes as runs of
    # INGEST_RUN messages.
    assert taken == [INGEST_RUN, INGEST_RUN, 1000 - 3 * INGEST_RUN]
    assert _acks(out) == (set(range(1, 1001)), set())
    got = _contents(core.broker)["sink"]
    assert got == [(f"m{i}".encode(), f"id-{i}") for i in range(700)]  # replays dropped
    assert len(journal) == 700
    assert core.broker.state.dedup.ids.duplicates == 300


def test_anything_unusual_goes_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = _runs(monkeypatch)
    core, s = _setup([])

    def rows(exchange: str, *pattern: Row, times: int) -> list[Message]:
        return [_message(core, exchange, i, r) for i, r in enumerate(list(pattern) * times)]

    fill = rows("", ("sink", None, False, False), times=300)
    _batch(core, s, "", fill)
    assert taken == [300 - INGEST_RUN]  # the run after the first is taken: the queue pages
    taken.clear()
    cases: list[tuple[str, list[Message]]] = [
        ("", rows("", ("sink", None, True, False), times=300)),  # persistent, durable queue
        ("", rows("", ("sink", None, False, False), ("plain", None, False, False), times=150)),
        ("amq.fanout", rows("amq.fanout", ("", None, False, False), times=300)),  # two queues
        ("", rows("", ("ttl", None, False, False), times=300)),  # a queue with an option
    ]
    for exchange, batch in cases:
        _batch(core, s, exchange, batch)
    assert taken == []
    # A no-local consumer's queue takes nothing its own connection publishes.
    sink = core.broker.vhosts["/"].queues["sink"]
    before = sink.queue.counters.paged + sink.queue.counters.ready
    sink.no_local = NoLocal(s.conn_id, None, core.broker.state.conns)  # the connection's rule
    _batch(core, s, "", rows("", ("sink", None, False, False), times=300))
    assert taken == []
    assert sink.queue.counters.paged + sink.queue.counters.ready == before
