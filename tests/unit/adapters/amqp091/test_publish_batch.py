"""The 0-9-1 adapter's `publish_batch` (publish runs, the streams API's bulk publish): the same
outcome as one basic.publish per message."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.adapters.amqp091 import as_frames
from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.core.broker import Broker
from ringmq.core.effects import Block, Effect, Reply
from tests.unit.adapters.amqp091.kit import Kit

_QUEUES: dict[str, dict[str, Any]] = {
    "plain": {},
    "reject": {"x-max-length": 3, "x-overflow": "reject-publish"},
    "drophead": {"x-max-length": 2, "x-overflow": "drop-head"},
    "dedup": {"x-message-deduplication-window-ms": 60_000},
}
_KEYS = [*_QUEUES, "nowhere"]


def _setup(confirm: bool = True) -> tuple[Kit, tuple[int, int]]:
    kit = Kit()
    ch = kit.open()
    for name, args in _QUEUES.items():
        kit.declare(ch, name, arguments=args)
    if confirm:
        kit.call(ch, spec.ConfirmSelect())
    return kit, ch


def _contents(broker: Broker) -> dict[str, list[bytes]]:
    vh = broker.vhosts["/"]
    out: dict[str, list[bytes]] = {}
    for name in _QUEUES:
        engine = vh.queues[name].queue
        bodies = []
        while (got := engine.fetch(0, ack_required=False)) is not None:
            bodies.append(bytes(got.message.body))
        out[name] = bodies
    return out


_message = st.tuples(
    st.sampled_from(_KEYS),
    st.none() | st.sampled_from(["a", "b", "c", "d"]),  # message_id
    st.sampled_from([None, 1, 2]),  # delivery_mode
    st.booleans(),  # extra plain properties (kombu-like)
)


def _encode(i: int, m: tuple[str, str | None, int | None, bool]) -> tuple[str, bytes, bytes]:
    rk, mid, mode, extra = m
    props = BasicProperties(
        message_id=mid,
        delivery_mode=mode,
        content_type="text/plain" if extra else None,
        headers={"n": i} if extra and i % 3 == 0 else None,
    )
    return rk, encode_properties(props), f"m{i}".encode()


def _acks(effects: list[Effect]) -> tuple[set[int], set[int]]:
    acked: set[int] = set()
    nacked: set[int] = set()
    for e in as_frames(effects):
        if isinstance(e, Reply):
            m = e.frame
            if isinstance(m, spec.BasicNack):
                nacked.add(m.delivery_tag)
            elif isinstance(m, spec.BasicAck):
                if m.multiple:
                    acked.update(range(1, m.delivery_tag + 1))
                else:
                    acked.add(m.delivery_tag)
    return acked - nacked, nacked


@settings(max_examples=60, deadline=None)
@given(st.lists(_message, max_size=40), st.lists(st.integers(1, 12), min_size=1, max_size=8))
def test_batch_equals_per_message(
    raw: list[tuple[str, str | None, int | None, bool]], cuts: list[int]
) -> None:
    messages = [_encode(i, m) for i, m in enumerate(raw)]
    one, ch1 = _setup()
    per: list[Effect] = []
    for rk, pb, body in messages:
        method = spec.BasicPublish(exchange="", routing_key=rk)
        per += one.call(ch1, method, RawContent(60, len(body), pb, body))
    two, ch2 = _setup()
    batch: list[Effect] = []
    a = 0
    k = 0
    while a < len(messages):
        b = min(len(messages), a + cuts[k % len(cuts)])
        k += 1
        done = two.amqp.publish_batch(ch2[0], ch2[1], "", messages, a, b, two.now)
        assert done.error is None
        assert done.published == b - a
        batch += done.effects
        a = b
    assert _contents(one.broker) == _contents(two.broker)
    assert _acks(per) == _acks(batch)
    acked, nacked = _acks(batch)
    assert acked | nacked == set(range(1, len(messages) + 1))
    assert one.broker.stats["published"] == two.broker.stats["published"]
    assert one.broker.stats["nacked"] == two.broker.stats["nacked"]
    # Acks and nacks keep the channel's order: each nack comes after the acks of earlier seqs.
    settled: set[int] = set()
    for e in batch:
        if isinstance(e, Reply) and isinstance(e.frame, spec.BasicNack):
            tag = e.frame.delivery_tag
            assert {t for t in acked if t < tag} <= settled
            settled.add(tag)
        elif isinstance(e, Reply) and isinstance(e.frame, spec.BasicAck):
            m = e.frame
            settled.update(range(1, m.delivery_tag + 1) if m.multiple else [m.delivery_tag])


def test_errors_stop_the_batch_and_report_the_count() -> None:
    kit, ch = _setup()
    big = b"x" * (kit.broker.max_message_size + 1)
    pb = encode_properties(BasicProperties())
    messages = [("plain", pb, b"a"), ("plain", pb, b"b"), ("plain", pb, big), ("plain", pb, b"c")]
    done = kit.amqp.publish_batch(ch[0], ch[1], "", messages, 0, 4, kit.now)
    assert done.published == 2
    assert isinstance(done.error, AMQPError)
    assert done.error.code == ReplyCode.PRECONDITION_FAILED
    assert done.error.class_id == spec.BasicPublish.CLASS_ID
    assert _acks(done.effects) == ({1, 2}, set())
    missing = kit.amqp.publish_batch(ch[0], ch[1], "nope", messages, 0, 1, kit.now)
    assert missing.published == 0
    assert isinstance(missing.error, AMQPError)
    assert missing.error.code == ReplyCode.NOT_FOUND


def test_without_confirms_and_in_tx() -> None:
    kit, ch = _setup(confirm=False)
    pb = encode_properties(BasicProperties(message_id="x"))
    messages = [("dedup", pb, b"1"), ("dedup", pb, b"2"), ("plain", pb, b"3")]
    done = kit.amqp.publish_batch(ch[0], ch[1], "", messages, 0, 3, kit.now)
    assert done.published == 3
    assert not [e for e in as_frames(done.effects) if isinstance(e, Reply)]
    assert _contents(kit.broker)["dedup"] == [b"1"]
    kit2, ch2 = _setup(confirm=False)
    kit2.call(ch2, spec.TxSelect())
    done = kit2.amqp.publish_batch(ch2[0], ch2[1], "", messages, 0, 3, kit2.now)
    assert done.published == 3
    assert _contents(kit2.broker)["plain"] == []
    kit2.call(ch2, spec.TxCommit())
    assert _contents(kit2.broker)["plain"] == [b"3"]


def test_blocking_limit_stops_after_the_blocking_message() -> None:
    kit, ch = _setup()
    pb = encode_properties(BasicProperties())
    kit.broker.set_alarm("memory", "memory alarm")
    messages = [("plain", pb, b"1"), ("plain", pb, b"2")]
    done = kit.amqp.publish_batch(ch[0], ch[1], "", messages, 0, 2, kit.now)
    # An alarm blocks the publishing connection right after its first publish.
    assert [e.conn_id for e in done.effects if isinstance(e, Block)] == [ch[0]]
    assert done.blocked
    assert done.published == 1
    assert _contents(kit.broker)["plain"] == [b"1"]
