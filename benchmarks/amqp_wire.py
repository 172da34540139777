"""Hand-encoded AMQP 0-9-1 frames for the load generator (sans-IO, no broker needed).

Theory of operation: the benchmark client needs only a few dozen methods, and it must not
spend its CPU budget encoding them, so every frame is built once as plain ``bytes`` by the
functions below and then written as is (publishes are pre-encoded and repeated). Incoming
bytes go through ``FrameReader``, which splits a byte stream into ``(type, channel, payload)``
triples without decoding the payload; the client decodes only the few replies it waits for.
This module owns no state beyond a ``FrameReader`` buffer and imports nothing from ringmq, so
the benchmark measures ringmq and RabbitMQ with exactly the same bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD: Final = 1
FRAME_HEADER: Final = 2
FRAME_BODY: Final = 3
FRAME_HEARTBEAT: Final = 8
FRAME_END: Final = 0xCE
FRAME_HEADER_SIZE: Final = 7  # type u8, channel u16, size u32
FRAME_OVERHEAD: Final = FRAME_HEADER_SIZE + 1  # plus the frame-end octet
DEFAULT_FRAME_MAX: Final = 131072

# (class_id, method_id) pairs the client matches on.
CONNECTION_START: Final = (10, 10)
CONNECTION_TUNE: Final = (10, 30)
CONNECTION_OPEN_OK: Final = (10, 41)
CONNECTION_CLOSE: Final = (10, 50)
CONNECTION_CLOSE_OK: Final = (10, 51)
CONNECTION_BLOCKED: Final = (10, 60)
CONNECTION_UNBLOCKED: Final = (10, 61)
CHANNEL_OPEN_OK: Final = (20, 11)
CHANNEL_CLOSE: Final = (20, 40)
CHANNEL_CLOSE_OK: Final = (20, 41)
EXCHANGE_DECLARE_OK: Final = (40, 11)
EXCHANGE_DELETE_OK: Final = (40, 21)
QUEUE_DECLARE_OK: Final = (50, 11)
QUEUE_BIND_OK: Final = (50, 21)
QUEUE_PURGE_OK: Final = (50, 31)
QUEUE_DELETE_OK: Final = (50, 41)
BASIC_QOS_OK: Final = (60, 11)
BASIC_CONSUME_OK: Final = (60, 21)
BASIC_CANCEL_OK: Final = (60, 31)
BASIC_RETURN: Final = (60, 50)
BASIC_DELIVER: Final = (60, 60)
BASIC_GET_OK: Final = (60, 71)
BASIC_GET_EMPTY: Final = (60, 72)
BASIC_ACK: Final = (60, 80)
BASIC_NACK: Final = (60, 120)
CONFIRM_SELECT_OK: Final = (85, 11)

_FRAME_HEAD: Final = struct.Struct(">BHI")
_METHOD_HEAD: Final = struct.Struct(">HH")
_CONTENT_HEAD: Final = struct.Struct(">HHQH")  # class, weight, body size, property flags
_U8: Final = struct.Struct(">B")
_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_U64: Final = struct.Struct(">Q")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_FLAG_DELIVERY_MODE: Final = 0x1000  # basic properties: bit 12 (spec 4.2.6.1 ordering)

FieldValue = bool | int | str | bytes | Mapping[str, "FieldValue"] | None


class WireError(Exception):
    """The peer sent bytes that are not a well-formed AMQP frame stream."""


def shortstr(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > 255:
        raise ValueError(f"shortstr longer than 255 bytes: {value[:40]!r}...")
    return _U8.pack(len(raw)) + raw


def longstr(value: bytes) -> bytes:
    return _U32.pack(len(value)) + value


def _field_value(value: FieldValue) -> bytes:
    # RabbitMQ's field types: t bool, I int32, l int64, S longstr, F table, V void.
    if isinstance(value, bool):
        return b"t" + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        if -(2**31) <= value < 2**31:
            return b"I" + _I32.pack(value)
        return b"l" + _I64.pack(value)
    if isinstance(value, str):
        return b"S" + longstr(value.encode())
    if isinstance(value, bytes):
        return b"x" + longstr(value)
    if value is None:
        return b"V"
    return b"F" + table(value)


def table(fields: Mapping[str, FieldValue]) -> bytes:
    """Encode a field table (length-prefixed)."""
    body = b"".join(shortstr(k) + _field_value(v) for k, v in fields.items())
    return longstr(body)


def _bits(*flags: bool) -> bytes:
    return _U8.pack(sum(1 << i for i, flag in enumerate(flags) if flag))


def frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return _FRAME_HEAD.pack(frame_type, channel, len(payload)) + payload + b"\xce"


def method(channel: int, class_id: int, method_id: int, args: bytes = b"") -> bytes:
    """One method frame."""
    return frame(FRAME_METHOD, channel, _METHOD_HEAD.pack(class_id, method_id) + args)


# -- connection class -------------------------------------------------------------------------


def connection_start_ok(user: str, password: str, product: str = "ringmq-bench") -> bytes:
    props: dict[str, FieldValue] = {
        "product": product,
        "capabilities": {
            "publisher_confirms": True,
            "basic.nack": True,
            "connection.blocked": True,
            "consumer_cancel_notify": True,
        },
    }
    response = b"\x00" + user.encode() + b"\x00" + password.encode()
    args = table(props) + shortstr("PLAIN") + longstr(response) + shortstr("en_US")
    return method(0, 10, 11, args)


def connection_tune_ok(channel_max: int, frame_max: int, heartbeat_s: int) -> bytes:
    return method(0, 10, 31, _U16.pack(channel_max) + _U32.pack(frame_max) + _U16.pack(heartbeat_s))


def connection_open(vhost: str) -> bytes:
    return method(0, 10, 40, shortstr(vhost) + shortstr("") + _bits(False))


def connection_close(reply_code: int = 200, reply_text: str = "bye") -> bytes:
    return method(0, 10, 50, _U16.pack(reply_code) + shortstr(reply_text) + b"\x00" * 4)


def connection_close_ok() -> bytes:
    return method(0, 10, 51)


# -- channel, exchange, queue ------------------------------------------------------------------


def channel_open(channel: int) -> bytes:
    return method(channel, 20, 10, shortstr(""))


def channel_close_ok(channel: int) -> bytes:
    return method(channel, 20, 41)


def exchange_declare(
    channel: int, exchange: str, type_: str, *, durable: bool = False, auto_delete: bool = False
) -> bytes:
    args = (
        _U16.pack(0)
        + shortstr(exchange)
        + shortstr(type_)
        + _bits(False, durable, auto_delete, False, False)
        + table({})
    )
    return method(channel, 40, 10, args)


def exchange_delete(channel: int, exchange: str) -> bytes:
    return method(channel, 40, 20, _U16.pack(0) + shortstr(exchange) + _bits(False, False))


def queue_declare(
    channel: int,
    queue: str,
    *,
    passive: bool = False,
    durable: bool = False,
    exclusive: bool = False,
    auto_delete: bool = False,
    arguments: Mapping[str, FieldValue] | None = None,
) -> bytes:
    args = (
        _U16.pack(0)
        + shortstr(queue)
        + _bits(passive, durable, exclusive, auto_delete, False)
        + table(arguments or {})
    )
    return method(channel, 50, 10, args)


def queue_bind(channel: int, queue: str, exchange: str, routing_key: str = "") -> bytes:
    args = (
        _U16.pack(0)
        + shortstr(queue)
        + shortstr(exchange)
        + shortstr(routing_key)
        + _bits(False)
        + table({})
    )
    return method(channel, 50, 20, args)


def queue_purge(channel: int, queue: str) -> bytes:
    return method(channel, 50, 30, _U16.pack(0) + shortstr(queue) + _bits(False))


def queue_delete(channel: int, queue: str) -> bytes:
    return method(channel, 50, 40, _U16.pack(0) + shortstr(queue) + _bits(False, False, False))


# -- basic and confirm -------------------------------------------------------------------------


def basic_qos(channel: int, prefetch_count: int, *, global_: bool = False) -> bytes:
    return method(channel, 60, 10, _U32.pack(0) + _U16.pack(prefetch_count) + _bits(global_))


def basic_consume(channel: int, queue: str, consumer_tag: str, *, no_ack: bool = False) -> bytes:
    args = (
        _U16.pack(0)
        + shortstr(queue)
        + shortstr(consumer_tag)
        + _bits(False, no_ack, False, False)
        + table({})
    )
    return method(channel, 60, 20, args)


def basic_cancel(channel: int, consumer_tag: str) -> bytes:
    return method(channel, 60, 30, shortstr(consumer_tag) + _bits(False))


def basic_ack(channel: int, delivery_tag: int, *, multiple: bool = False) -> bytes:
    return method(channel, 60, 80, _U64.pack(delivery_tag) + _bits(multiple))


def basic_get(channel: int, queue: str, *, no_ack: bool = False) -> bytes:
    return method(channel, 60, 70, _U16.pack(0) + shortstr(queue) + _bits(no_ack))


def basic_reject(channel: int, delivery_tag: int, *, requeue: bool = True) -> bytes:
    return method(channel, 60, 90, _U64.pack(delivery_tag) + _bits(requeue))


def confirm_select(channel: int) -> bytes:
    return method(channel, 85, 10, _bits(False))


def content_header(body_size: int, *, persistent: bool) -> bytes:
    """The payload of a basic content header frame: only delivery-mode is ever set."""
    if persistent:
        return _CONTENT_HEAD.pack(60, 0, body_size, _FLAG_DELIVERY_MODE) + b"\x02"
    return _CONTENT_HEAD.pack(60, 0, body_size, 0)


@dataclass(frozen=True, slots=True)
class PublishTemplate:
    """The frames of one basic.publish, ready to be written as is or repeated.

    ``body_offset`` is where the body starts inside ``frames``, so a caller can stamp the
    first bytes of the body (the latency scenario writes a send timestamp there).
    """

    frames: bytes
    body_offset: int


def publish(
    channel: int,
    exchange: str,
    routing_key: str,
    body: bytes,
    *,
    persistent: bool = False,
    frame_max: int = DEFAULT_FRAME_MAX,
) -> PublishTemplate:
    """Method, content header and body frames (split at ``frame_max``) of one publish."""
    args = _U16.pack(0) + shortstr(exchange) + shortstr(routing_key) + _bits(False, False)
    head = method(channel, 60, 40, args) + frame(
        FRAME_HEADER, channel, content_header(len(body), persistent=persistent)
    )
    chunk = frame_max - FRAME_OVERHEAD
    bodies = [frame(FRAME_BODY, channel, body[i : i + chunk]) for i in range(0, len(body), chunk)]
    return PublishTemplate(head + b"".join(bodies), len(head) + FRAME_HEADER_SIZE)


# -- decoding ----------------------------------------------------------------------------------


class FrameReader:
    """Split a byte stream into frames; payloads are returned as ``bytes`` copies.

    ``feed`` appends, ``frames`` yields every complete frame and then compacts the buffer once.
    """

    def __init__(self, frame_max: int = DEFAULT_FRAME_MAX) -> None:
        self._buf = bytearray()
        self.frame_max = frame_max

    def feed(self, data: bytes) -> None:
        self._buf += data

    def frames(self) -> list[tuple[int, int, bytes]]:
        buf = self._buf
        out: list[tuple[int, int, bytes]] = []
        pos = 0
        size_all = len(buf)
        while size_all - pos >= FRAME_HEADER_SIZE:
            ftype, channel, size = _FRAME_HEAD.unpack_from(buf, pos)
            if size > self.frame_max:
                raise WireError(f"frame of {size} bytes exceeds frame_max {self.frame_max}")
            end = pos + FRAME_HEADER_SIZE + size
            if end >= size_all:
                break
            if buf[end] != FRAME_END:
                raise WireError(f"bad frame end 0x{buf[end]:02x}")
            out.append((ftype, channel, bytes(buf[pos + FRAME_HEADER_SIZE : end])))
            pos = end + 1
        if pos:
            del buf[:pos]
        return out


def method_id(payload: bytes) -> tuple[int, int]:
    class_id, method_no = _METHOD_HEAD.unpack_from(payload, 0)
    return int(class_id), int(method_no)


class ArgReader:
    """Sequential reader of method arguments (only the types the client needs)."""

    def __init__(self, payload: bytes, offset: int = 4) -> None:
        self._data = payload
        self.pos = offset

    def u8(self) -> int:
        value: int = self._data[self.pos]
        self.pos += 1
        return value

    def u16(self) -> int:
        (value,) = _U16.unpack_from(self._data, self.pos)
        self.pos += 2
        return int(value)

    def u32(self) -> int:
        (value,) = _U32.unpack_from(self._data, self.pos)
        self.pos += 4
        return int(value)

    def u64(self) -> int:
        (value,) = _U64.unpack_from(self._data, self.pos)
        self.pos += 8
        return int(value)

    def shortstr(self) -> str:
        size = self.u8()
        value = self._data[self.pos : self.pos + size].decode()
        self.pos += size
        return value

    def longstr(self) -> bytes:
        size = self.u32()
        value = self._data[self.pos : self.pos + size]
        self.pos += size
        return bytes(value)


def decode_close(payload: bytes) -> tuple[int, str, int, int]:
    """reply_code, reply_text, class_id, method_id of connection.close or channel.close."""
    args = ArgReader(payload)
    return args.u16(), args.shortstr(), args.u16(), args.u16()


def decode_tune(payload: bytes) -> tuple[int, int, int]:
    """channel_max, frame_max, heartbeat of connection.tune."""
    args = ArgReader(payload)
    return args.u16(), args.u32(), args.u16()


def decode_queue_declare_ok(payload: bytes) -> tuple[str, int, int]:
    """queue, message_count, consumer_count."""
    args = ArgReader(payload)
    return args.shortstr(), args.u32(), args.u32()


def decode_basic_ack(payload: bytes) -> tuple[int, bool]:
    """delivery_tag and multiple of basic.ack or basic.nack (the first bit is multiple)."""
    args = ArgReader(payload)
    return args.u64(), bool(args.u8() & 1)


def decode_get_ok(payload: bytes) -> tuple[int, int]:
    """delivery_tag and message_count (messages left after this one) of basic.get-ok."""
    args = ArgReader(payload)
    tag = args.u64()
    args.u8()  # redelivered
    args.shortstr()  # exchange
    args.shortstr()  # routing_key
    return tag, args.u32()


def decode_deliver_tag(payload: bytes) -> int:
    """The delivery_tag of basic.deliver (after the consumer tag)."""
    args = ArgReader(payload)
    args.shortstr()
    return args.u64()
