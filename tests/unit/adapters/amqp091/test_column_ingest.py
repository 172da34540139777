"""The columnar ingest (core/ingest.py `ingest_columns`, the AMQP 0-9-1 adapter's `columns_of`,
storage/pageruns.py `column_records`): a batch published as columns onto queues paging to disk
gives what one basic.publish per message gives: the queues' messages as a consumer reads them
and as the browse reads them (every field), counters, confirms and de-duplication verdicts.

Here with the adapter's tests: what it checks is the 0-9-1 translation into columns (raw
property lists read by `columns_of`, `build` for the rest) against 0-9-1 publishes."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.adapters.amqp091.message import build, columns_of
from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.core import ingest
from ringmq.core.broker import Broker
from ringmq.core.effects import Effect
from ringmq.storage.bodystore import DiskSpillStore
from tests.unit.adapters.amqp091.kit import Kit
from tests.unit.adapters.amqp091.test_publish_batch import _acks

_WINDOW = {"x-message-deduplication-window-ms": 60_000}
_HEAD = 3  # in-memory bound: the queues page from the 4th message on


def _setup(d: Path, journal: list[tuple[str, str, int]]) -> tuple[Kit, tuple[int, int]]:
    kit = Kit()
    kit.broker.enable_paging(lambda _vh, q: DiskSpillStore(d / q), _HEAD, 1 << 20)
    ch = kit.open()
    kit.declare(ch, "sink", durable=True, arguments=_WINDOW)  # a Spark sink
    kit.declare(ch, "transient", arguments=_WINDOW)  # persistent messages go as columns
    kit.declare(ch, "plain")
    kit.call(ch, spec.ConfirmSelect())
    kit.broker.state.dedup.journal = lambda key, mid, at: journal.append((key, mid, at))
    return kit, ch


def _fields(m: Any) -> tuple[Any, ...]:
    return (
        m.exchange,
        m.routing_key,
        bytes(m.properties_bin),
        bytes(m.body),
        m.headers,
        m.priority,
        m.expiration_ms,
        m.persistent,
        m.message_id,
        m.timestamp_ms,
    )


def _browsed(broker: Broker) -> dict[str, list[tuple[Any, ...]]]:
    # every queue's rows as the columnar browse reads them (no message built for page runs)
    out = {}
    for name, q in broker.vhosts["/"].queues.items():
        cols = q.queue.browse_columns(None, 10_000, 0)
        out[name] = list(
            zip(
                cols.seqs,
                cols.timestamps,
                cols.exchanges.values(),
                cols.routing_keys.values(),
                cols.properties.values(),
                cols.bodies.values(),
                strict=True,
            )
        )
    return out


def _consumed(broker: Broker) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    for name, q in broker.vhosts["/"].queues.items():
        got = []
        while (d := q.queue.fetch(0, ack_required=False)) is not None:
            got.append(_fields(d.message))
        out[name] = got
    return out


_PROPS = st.sampled_from(["none", "mid", "mid"] * 4 + ["many", "dm", "headers", "ttl", "prio"])


def _encode(i: int, rk: str, kind: str, mid: str | None, mode: int | None) -> bytes:
    p = BasicProperties(message_id=mid, delivery_mode=mode)
    if kind == "many":
        p.content_type, p.correlation_id, p.app_id, p.timestamp = "text/plain", "c", "a", 7
    elif kind == "dm":
        p = BasicProperties(delivery_mode=mode or 1, content_type="x")
    elif kind == "none":
        p = BasicProperties()
    elif kind == "headers":
        p.headers = {"n": i}
    elif kind == "ttl":
        p.expiration = "60000"
    elif kind == "prio":
        p.priority = 3
    return encode_properties(p)


_message = st.tuples(
    st.sampled_from(["sink"] * 4 + ["transient"] * 8 + ["plain", "nowhere"]),
    _PROPS,
    st.none() | st.sampled_from(["a", "b", "c", "d", "e", "f", "g"]),  # message_id
    st.sampled_from([None] * 6 + [1, 2]),  # delivery_mode
    st.sampled_from([1, 1, 1, 2000, 70_000]),  # body size (70 000: over a run's bytes bound)
)


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    # the lengths of the runs the columnar ingest took
    taken: list[int] = []
    real = ingest.ingest_columns

    def spy(*args: Any) -> bool:
        ok = real(*args)
        if ok:
            taken.append(len(args[4]))
        return ok

    monkeypatch.setattr("ringmq.core.publishbatch.ingest_columns", spy)
    return taken


_took = [0, 0]  # examples run, examples where the columnar ingest took a run


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(_message, min_size=1, max_size=40), min_size=1, max_size=4),
    st.integers(3, 8),  # messages to each queue first, so that it pages
    st.lists(st.integers(2, 60), min_size=1, max_size=4),
)
def test_columns_equal_per_message(
    blocks: list[list[tuple[str, str, str | None, int | None, int]]],
    prefix: int,
    cuts: list[int],
) -> None:
    # blocks of one routing key and one property kind, as a Spark sink sends them, mixed
    raw: list[tuple[str, str, str | None, int | None, int]] = []
    raw += [("transient", "mid", None, None, 1)] * prefix
    raw += [("sink", "mid", None, None, 1)] * prefix
    for block in blocks:
        rk, kind = block[0][0], block[0][1]
        raw += [(rk, kind, mid, mode, size) for _, _, mid, mode, size in block]
    messages = [
        (rk, _encode(i, rk, kind, mid, mode), bytes([i % 251]) * size)
        for i, (rk, kind, mid, mode, size) in enumerate(raw)
    ]
    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as tmp:
        taken = _spy(mp)
        j1: list[tuple[str, str, int]] = []
        one, ch1 = _setup(Path(tmp) / "one", j1)
        per: list[Effect] = []
        for rk, pb, body in messages:
            method = spec.BasicPublish(exchange="", routing_key=rk)
            per += one.call(ch1, method, RawContent(60, len(body), pb, body))
        j2: list[tuple[str, str, int]] = []
        two, ch2 = _setup(Path(tmp) / "two", j2)
        batch: list[Effect] = []
        a = k = 0
        while a < len(messages):
            b = min(len(messages), a + cuts[k % len(cuts)])
            k += 1
            done = two.amqp.publish_batch(ch2[0], ch2[1], "", messages, a, b, two.now)
            assert done.error is None
            assert done.published == b - a
            batch += done.effects
            a = b
        _took[0] += 1
        _took[1] += bool(taken)
        assert j1 == j2  # the durable window journals the same ids
        assert _acks(per) == _acks(batch)
        for key in ("published", "nacked", "unroutable"):
            assert one.broker.stats[key] == two.broker.stats[key]
        assert one.broker.state.dedup.ids.duplicates == two.broker.state.dedup.ids.duplicates
        for name, q1 in one.broker.vhosts["/"].queues.items():
            q2 = two.broker.vhosts["/"].queues[name]
            c1, c2 = q1.queue.counters, q2.queue.counters
            assert (c1.ready, c1.ready_bytes, c1.paged, c1.added) == (
                c2.ready,
                c2.ready_bytes,
                c2.paged,
                c2.added,
            )
        assert _browsed(one.broker) == _browsed(two.broker)
        assert _consumed(one.broker) == _consumed(two.broker)


def test_some_examples_took_columns() -> None:
    # the property test is only worth its cost if the columnar ingest took runs in it
    if _took[0] < 100:
        test_columns_equal_per_message()
    assert _took[1] >= 10, _took


@pytest.mark.parametrize(
    "props",
    [
        BasicProperties(),
        BasicProperties(message_id="m-1"),
        BasicProperties(delivery_mode=2, message_id="m-2", content_type="a/b"),
        BasicProperties(delivery_mode=1, content_type="x"),
        BasicProperties(
            content_type="t", correlation_id="c", message_id="é", timestamp=9, app_id="a"
        ),
    ],
)
def test_columns_stand_for_what_build_makes(props: BasicProperties) -> None:
    pb = encode_properties(props)
    rows = [("rk", pb, b"body-%d" % i) for i in range(3)]
    cols, end = columns_of("x", rows, 0, 3, 1 << 20, 42)
    assert cols is not None
    assert end == 3
    want = [_fields(build(None, "x", rk, p, b, 42)) for rk, p, b in rows]
    assert [_fields(m) for m in cols.messages()] == want


def test_columns_stop_at_what_they_cannot_hold() -> None:
    mid = encode_properties(BasicProperties(message_id="m"))
    hdr = encode_properties(BasicProperties(headers={"a": 1}))
    rows = [("k", mid, b"a"), ("k", mid, b"b"), ("k", hdr, b"c"), ("k", mid, b"d")]
    assert columns_of("", rows, 0, 4, 100, 0)[1] == 2  # headers: built one at a time
    rows[1] = ("other", mid, b"b")
    assert columns_of("", rows, 0, 4, 100, 0) == (None, 0)  # a run of one is no run
    rows[1] = ("k", mid, b"x" * 101)
    assert columns_of("", rows, 0, 4, 100, 0) == (None, 0)  # too large: the error is built's
