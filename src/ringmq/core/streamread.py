"""Stream queues' consumers: where each starts, and what it reads next.

Every consumer of a stream queue (`QueueEntity.stream`) reads the log from its own offset, as
a browser reads a queue: its cursor is the last offset it was given, `Delivery` tracks its
deliveries for credit only (settling gives credit back, nothing is removed). This module holds
the two stream rules `Delivery` applies: RabbitMQ's checks and the starting offset of a new
consumer (`stream_cursor`), and the read of the next messages with their `x-stream-offset`
header (`stream_read`).

Pure: no I/O of its own (the log is read through its port), no clock.
"""

from __future__ import annotations

from typing import Any

from ringmq.core.entities import Consumer, QueueEntity
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.message import Message, SeqId
from ringmq.core.queue import Delivery as Handed
from ringmq.core.session import Session
from ringmq.core.streamlog import StreamLog, parse_offset_spec, start_offset


def stream_cursor(
    s: Session,
    q: QueueEntity,
    no_ack: bool,
    credit_flow: bool,
    arguments: dict[str, Any],
    now_ms: int,
) -> SeqId:
    """A new consumer's cursor on stream `q`: the offset before the one it starts at
    (`x-stream-offset` in `arguments`). RabbitMQ's checks (`rabbit_stream_queue:consume/3`),
    in its order and words: a prefetch (unless `credit_flow`: link credit), acknowledgements,
    no global qos, a valid offset specification."""
    rs = f"queue '{q.name}' in vhost '{q.vhost}'"
    if not credit_flow and not s.prefetch_count:
        raise BrokerError(
            Condition.PRECONDITION_FAILED, f"consumer prefetch count is not set for '{rs}'"
        )
    if no_ack and not credit_flow:
        raise BrokerError(
            Condition.NOT_IMPLEMENTED,
            f"automatic acknowledgement not supported by stream queues {rs}",
        )
    if not credit_flow and s.global_prefetch:
        raise BrokerError(Condition.PRECONDITION_FAILED, "global_qos_not_supported_for_queue_type")
    raw = arguments.get("x-stream-offset")
    try:
        spec = parse_offset_spec(raw, now_ms)
    except ValueError:
        raise BrokerError(
            Condition.PRECONDITION_FAILED, f"invalid x-stream-offset {raw!r} for {rs}"
        ) from None
    assert q.stream is not None
    q.stream.enforce(now_ms)
    return SeqId(start_offset(q.stream, spec) - 1)


def _chunk_message(data: bytes) -> Message:
    # A stored chunk as the body of a delivery (`Consumer.chunks`): nothing reads it but the
    # stream protocol's adapter, which sends it as it is.
    return Message("", "", b"", data)


def stream_read(c: Consumer, log: StreamLog, want: int) -> list[Handed]:
    """Up to `want` messages of stream `log` past consumer `c`'s cursor, each with its offset
    in an `x-stream-offset` header (as RabbitMQ delivers them); the cursor moves past them.
    A chunk consumer (`Consumer.chunks`) gets up to `want` whole chunks instead."""
    cursor = c.cursor
    assert cursor is not None
    if c.chunks:  # whole chunks as stored, one delivery each (body: the chunk's bytes)
        chunks = log.read_chunks(cursor + 1, want)
        if not chunks:
            return []
        first, count, _ = chunks[-1]
        c.cursor = SeqId(first + count - 1)
        return [Handed(SeqId(f), _chunk_message(data), False, 1) for f, _n, data in chunks]
    got = log.read(cursor + 1, want)
    if not got:
        return []
    c.cursor = SeqId(got[-1][0])
    if not c.offset_header:
        return [Handed(SeqId(offset), msg, False, 1) for offset, msg in got]
    out: list[Handed] = []
    for offset, msg in got:
        headers = dict(msg.headers) if msg.headers else {}
        headers["x-stream-offset"] = offset
        out.append(Handed(SeqId(offset), msg.reheadered(headers), False, 1))
    return out
