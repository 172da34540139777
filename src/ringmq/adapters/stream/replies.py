"""The stream protocol adapter's pure helpers: argument and offset mappings, response codes,
and the frames it answers with that need no connection state (confirms, stream statistics).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from typing import Any, Final

from ringmq.core.errors import BrokerError, Condition
from ringmq.core.streamlog import StreamLog
from ringmq.streamproto import codec as sp
from ringmq.streamproto import commands as sc
from ringmq.streamproto.codec import RESPONSE, Code, Key, Writer

ARGUMENTS: Final = {
    "max-length-bytes": ("x-max-length-bytes", int),
    "max-age": ("x-max-age", str),
    "stream-max-segment-size-bytes": ("x-stream-max-segment-size-bytes", int),
}
"""Create's arguments (strings on the wire) as queue arguments (RabbitMQ's mapping)."""
CONDITION_CODES: Final = {
    Condition.ACCESS_REFUSED: Code.ACCESS_REFUSED,
    Condition.PRECONDITION_FAILED: Code.PRECONDITION_FAILED,
    Condition.NOT_FOUND: Code.STREAM_DOES_NOT_EXIST,
    Condition.RESOURCE_LOCKED: Code.PRECONDITION_FAILED,
}
OFFSET_KINDS: Final = {1: "first", 2: "last", 3: "next"}


def queue_arguments(props: dict[str, str]) -> dict[str, Any]:
    # Create's arguments (strings on the wire) as stream queue arguments.
    args: dict[str, Any] = {}
    for name, value in props.items():
        known = ARGUMENTS.get(name)
        if known is not None:
            try:
                args[known[0]] = known[1](value)
            except ValueError:
                raise BrokerError(Condition.PRECONDITION_FAILED, f"bad {name}") from None
    return args


def client_properties() -> dict[str, Any]:
    # A deleted stream ends its subscriptions with a MetadataUpdate (`CancelConsumer`).
    return {"capabilities": {"consumer_cancel_notify": True}}


def code_of(exc: BrokerError) -> Code:
    return CONDITION_CODES.get(exc.condition, Code.INTERNAL_ERROR)


def wrapped(data: bytes) -> bytes:
    # A payload that is not an AMQP 1.0 message: kept as the body of one (a data section).
    return b"\x00\x53\x75\xb0" + len(data).to_bytes(4, "big") + data


def offset_spec(kind: int, offset: int) -> Any:
    # The stream protocol's offset specification as `x-stream-offset` (None: not one).
    if kind in OFFSET_KINDS:
        return OFFSET_KINDS[kind]
    if kind == 4:
        return offset
    if kind == 5:
        return datetime.fromtimestamp(offset / 1000, UTC)
    return None


def key_of(cmd: sc.Command) -> tuple[Key, int | None]:
    keys = {
        sc.Create: Key.CREATE,
        sc.Delete: Key.DELETE,
        sc.Metadata: Key.METADATA,
        sc.DeclarePublisher: Key.DECLARE_PUBLISHER,
        sc.DeletePublisher: Key.DELETE_PUBLISHER,
        sc.QueryPublisherSequence: Key.QUERY_PUBLISHER_SEQUENCE,
        sc.Publish: Key.PUBLISH,
        sc.Subscribe: Key.SUBSCRIBE,
        sc.Unsubscribe: Key.UNSUBSCRIBE,
        sc.Credit: Key.CREDIT,
        sc.StoreOffset: Key.STORE_OFFSET,
        sc.QueryOffset: Key.QUERY_OFFSET,
        sc.StreamStats: Key.STREAM_STATS,
        sc.ConsumerUpdateAnswer: Key.CONSUMER_UPDATE,
        sc.ExchangeCommandVersions: Key.EXCHANGE_COMMAND_VERSIONS,
        sc.CreateSuperStream: Key.CREATE_SUPER_STREAM,
        sc.DeleteSuperStream: Key.DELETE_SUPER_STREAM,
        sc.Partitions: Key.PARTITIONS,
        sc.Route: Key.ROUTE,
    }
    return keys[type(cmd)], getattr(cmd, "correlation_id", None)


def confirm_frame(pid: int, ids: list[int]) -> bytes:
    n = len(ids)
    return Writer().raw(struct.pack(f">Bi{n}Q", pid, n, *ids)).frame(Key.PUBLISH_CONFIRM)


def stats_frame(log: StreamLog | None, correlation_id: int) -> bytes:
    """StreamStats' answer: RabbitMQ's statistics (osiris), the first offset of the first and
    of the last chunk kept (every chunk is committed once written here), -1 for none."""
    if log is None:
        w = sp.response(Key.STREAM_STATS, correlation_id, Code.STREAM_DOES_NOT_EXIST)
        return w.count(0).frame(Key.STREAM_STATS | RESPONSE)
    index = log.index
    empty = index.next_offset == index.first_offset
    first = -1 if empty else index.first_offset
    committed = -1 if empty else index.last_chunk_offset
    w = sp.response(Key.STREAM_STATS, correlation_id, Code.OK).count(2)
    w.string("first_chunk_id").i64(first).string("committed_chunk_id").i64(committed)
    return w.frame(Key.STREAM_STATS | RESPONSE)
