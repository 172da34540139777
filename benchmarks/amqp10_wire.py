"""The few AMQP 1.0 frames the AMQP 1.0 load generator needs, hand-encoded, and a small decoder.

Theory of operation: like `amqp_wire` for AMQP 0-9-1, the load generator must cost the same
against every broker and little, so it encodes its frames itself (independent of ringmq's own
codec: this is the other side of the wire) and decodes only what it reads. Encoding covers the
SASL exchange (PLAIN), open, begin, attach (with source and target), flow, transfer (a data
section, optionally after a header section with `durable`), disposition (accepted), detach,
end and close. Decoding is a small recursive reader of the type system for performatives, plus
a fast path that reads only the handle and delivery-id of a transfer. Checked against
python-qpid-proton's codec in tests/unit/bench/.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, Final

AMQP_HEADER: Final = b"AMQP\x00\x01\x00\x00"
SASL_HEADER: Final = b"AMQP\x03\x01\x00\x00"

OPEN, BEGIN, ATTACH, FLOW, TRANSFER, DISPOSITION, DETACH, END, CLOSE = range(0x10, 0x19)
SASL_MECHANISMS, SASL_INIT, SASL_CHALLENGE, SASL_RESPONSE, SASL_OUTCOME = range(0x40, 0x45)
SOURCE: Final = 0x28
TARGET: Final = 0x29
ACCEPTED: Final = 0x24
HEADER_SECTION: Final = 0x70
DATA_SECTION: Final = 0x75

_U32 = struct.Struct(">I")
_FRAME_HEAD = struct.Struct(">IBBH")


class Symbol(str):
    """An AMQP symbol (encoded as sym8/sym32, not as a string)."""

    __slots__ = ()


class Described:
    """A described value (descriptor code, value)."""

    __slots__ = ("code", "value")

    def __init__(self, code: int, value: Any) -> None:
        self.code = code
        self.value = value

    def __repr__(self) -> str:
        return f"Described(0x{self.code:x}, {self.value!r})"


# -- encoding -------------------------------------------------------------------------------


def encode(value: Any) -> bytes:
    """One value in the smallest constructor (ints are uints)."""
    if value is None:
        return b"\x40"
    if value is True:
        return b"\x41"
    if value is False:
        return b"\x42"
    if isinstance(value, Described):
        return b"\x00\x53" + bytes([value.code]) + encode(value.value)
    if isinstance(value, int):
        if value == 0:
            return b"\x43"
        if value < 256:
            return b"\x52" + bytes([value])
        return b"\x70" + _U32.pack(value)
    if isinstance(value, Symbol):
        raw = value.encode("ascii")
        return (
            b"\xa3" + bytes([len(raw)]) if len(raw) < 256 else b"\xb3" + _U32.pack(len(raw))
        ) + raw
    if isinstance(value, str):
        raw = value.encode()
        return (
            b"\xa1" + bytes([len(raw)]) if len(raw) < 256 else b"\xb1" + _U32.pack(len(raw))
        ) + raw
    if isinstance(value, bytes):
        return (
            b"\xa0" + bytes([len(value)]) if len(value) < 256 else b"\xb0" + _U32.pack(len(value))
        ) + value
    if isinstance(value, list):
        return encode_list(value)
    if isinstance(value, dict):
        items = b"".join(encode(k) + encode(v) for k, v in value.items())
        return b"\xd1" + _U32.pack(len(items) + 4) + _U32.pack(2 * len(value)) + items
    raise TypeError(f"cannot encode {type(value).__name__}")


def ubyte(n: int) -> bytes:
    return b"\x50" + bytes([n])


def ushort(n: int) -> bytes:
    return b"\x60" + struct.pack(">H", n)


class Raw(bytes):
    """Bytes already encoded as one AMQP value (inserted as they are)."""


def encode_list(items: list[Any]) -> bytes:
    while items and items[-1] is None:  # trailing nulls may be omitted
        items = items[:-1]
    if not items:
        return b"\x45"
    body = b"".join(bytes(i) if isinstance(i, Raw) else encode(i) for i in items)
    if len(body) < 255 and len(items) < 256:
        return b"\xc0" + bytes([len(body) + 1, len(items)]) + body
    return b"\xd0" + _U32.pack(len(body) + 4) + _U32.pack(len(items)) + body


def performative(code: int, fields: list[Any]) -> bytes:
    return b"\x00\x53" + bytes([code]) + encode_list(fields)


def frame(channel: int, body: bytes, *, frame_type: int = 0) -> bytes:
    return _FRAME_HEAD.pack(8 + len(body), 2, frame_type, channel) + body


def sasl_init_plain(user: str, password: str) -> bytes:
    response = b"\x00" + user.encode() + b"\x00" + password.encode()
    return frame(0, performative(SASL_INIT, [Symbol("PLAIN"), response]), frame_type=1)


def open_frame(container_id: str, hostname: str | None = None, max_frame: int = 1 << 20) -> bytes:
    return frame(0, performative(OPEN, [container_id, hostname, max_frame]))


def begin_frame(window: int = 1 << 20) -> bytes:
    # remote-channel null (we start it), next-outgoing-id 0, incoming and outgoing windows
    return frame(0, performative(BEGIN, [None, 0, window, window]))


def attach_frame(
    name: str,
    handle: int,
    *,
    receiver: bool,
    address: str,
    settled: bool = False,
    capabilities: list[str] | None = None,
) -> bytes:
    caps = [Symbol(c) for c in capabilities] if capabilities else None
    cap_raw = Raw(_symbol_array(caps)) if caps else None
    terminus_fields: list[Any] = [address]
    if receiver:
        source = Described(SOURCE, [address, *([None] * 9), cap_raw] if cap_raw else [address])
        target = Described(TARGET, [])
    else:
        source = Described(SOURCE, [])
        target = Described(
            TARGET, [*terminus_fields, *([None] * 5), cap_raw] if cap_raw else terminus_fields
        )
    snd_settle = Raw(ubyte(1 if settled else 0))  # settled / unsettled
    fields: list[Any] = [name, handle, receiver, snd_settle, Raw(ubyte(0)), source, target]
    if not receiver:
        fields += [None, None, 0]  # unsettled, incomplete-unsettled, initial-delivery-count
    return frame(0, performative(ATTACH, fields))


def _symbol_array(symbols: list[Symbol]) -> bytes:
    raws = [s.encode("ascii") for s in symbols]
    body = b"".join(bytes([len(r)]) + r for r in raws)
    return b"\xe0" + bytes([len(body) + 2, len(raws), 0xA3]) + body


def flow_frame(
    *,
    next_incoming_id: int,
    window: int,
    next_outgoing_id: int,
    handle: int,
    delivery_count: int,
    link_credit: int,
) -> bytes:
    return frame(
        0,
        performative(
            FLOW,
            [
                next_incoming_id,
                window,
                next_outgoing_id,
                window,
                handle,
                delivery_count,
                link_credit,
            ],
        ),
    )


def message_payload(body: bytes, *, durable: bool = False) -> bytes:
    """A bare message: an optional header section (durable), then one data section."""
    head = performative(HEADER_SECTION, [True]) if durable else b""
    return head + b"\x00\x53" + bytes([DATA_SECTION]) + encode(body)


def transfer(handle: int, delivery_id: int, payload: bytes, *, settled: bool) -> bytes:
    tag = _U32.pack(delivery_id)
    fields = [handle, Raw(b"\x70" + _U32.pack(delivery_id)), tag, 0, settled]
    return frame(0, performative(TRANSFER, fields) + payload)


class TransferTemplate:
    """The `transfer` frames of one payload on one link, encoded once: only the delivery id
    and the tag (its four bytes) change from one to the next, so a batch is a struct pack per
    message (the 0-9-1 generator sends its publish template likewise)."""

    _MARK: Final = 0x01020304

    def __init__(self, handle: int, payload: bytes, *, settled: bool) -> None:
        frame = transfer(handle, self._MARK, payload, settled=settled)
        mark = _U32.pack(self._MARK)
        i = frame.index(b"\x70" + mark) + 1
        j = frame.index(b"\xa0\x04" + mark, i) + 2
        self._pack = struct.Struct(f">{i}sI{j - i - 4}sI").pack
        self._head, self._mid, self._tail = frame[:i], frame[i + 4 : j], frame[j + 4 :]

    def frames(self, first: int, n: int) -> bytes:
        """The frames of delivery ids `first` .. `first + n - 1`, byte for byte `transfer`'s."""
        pack, head, mid, tail = self._pack, self._head, self._mid, self._tail
        return b"".join([pack(head, d, mid, d) + tail for d in range(first, first + n)])


def disposition_frame(first: int, last: int) -> bytes:
    """The receiver settles deliveries first..last as accepted."""
    return frame(0, performative(DISPOSITION, [True, first, last, True, Described(ACCEPTED, [])]))


def close_frame() -> bytes:
    return frame(0, performative(CLOSE, []))


# -- decoding -------------------------------------------------------------------------------

_FIXED: Final = {
    0x50: 1,
    0x51: 1,
    0x60: 2,
    0x61: 2,
    0x70: 4,
    0x71: 4,
    0x72: 4,
    0x73: 4,
    0x80: 8,
    0x81: 8,
    0x82: 8,
    0x83: 8,
    0x84: 8,
    0x94: 16,
    0x98: 16,
    0x52: 1,
    0x53: 1,
    0x54: 1,
    0x55: 1,
    0x56: 1,
}


def decode(buf: bytes | memoryview, pos: int = 0) -> tuple[Any, int]:
    """One value at `pos`: (value, end). Unsigned and signed ints are ints, binary is bytes,
    strings and symbols are str, lists, maps (as dicts) and arrays (as lists) recurse."""
    return _value(buf[pos], buf, pos + 1)


def _value(c: int, buf: bytes | memoryview, pos: int) -> tuple[Any, int]:
    # the value of constructor `c` whose data starts at `pos`
    if c == 0x00:
        descriptor, pos = decode(buf, pos)
        value, pos = decode(buf, pos)
        return Described(descriptor if isinstance(descriptor, int) else -1, value), pos
    if c == 0x40:
        return None, pos
    if c in (0x41, 0x42):
        return c == 0x41, pos
    if c in (0x43, 0x44):
        return 0, pos
    if c == 0x45:
        return [], pos
    if c in (0x52, 0x53, 0x50):
        return buf[pos], pos + 1
    if c == 0x56:
        return buf[pos] == 1, pos + 1
    if c in (0x54, 0x51):
        return struct.unpack_from(">b", buf, pos)[0], pos + 1
    if c in (0x60,):
        return struct.unpack_from(">H", buf, pos)[0], pos + 2
    if c in (0x70,):
        return _U32.unpack_from(buf, pos)[0], pos + 4
    if c in (0x71,):
        return struct.unpack_from(">i", buf, pos)[0], pos + 4
    if c in (0x80, 0x83):
        return struct.unpack_from(">Q", buf, pos)[0], pos + 8
    if c == 0x81:
        return struct.unpack_from(">q", buf, pos)[0], pos + 8
    if c == 0x98:
        return uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16
    if c in (0xA0, 0xA1, 0xA3):
        n = buf[pos]
        raw = bytes(buf[pos + 1 : pos + 1 + n])
        return (raw if c == 0xA0 else raw.decode()), pos + 1 + n
    if c in (0xB0, 0xB1, 0xB3):
        n = _U32.unpack_from(buf, pos)[0]
        raw = bytes(buf[pos + 4 : pos + 4 + n])
        return (raw if c == 0xB0 else raw.decode()), pos + 4 + n
    if c in (0xC0, 0xC1):
        size, count = buf[pos], buf[pos + 1]
        return _items(buf, pos + 2, count, c == 0xC1), pos + 1 + size
    if c in (0xD0, 0xD1):
        size, count = _U32.unpack_from(buf, pos)[0], _U32.unpack_from(buf, pos + 4)[0]
        return _items(buf, pos + 8, count, c == 0xD1), pos + 4 + size
    if c in (0xE0, 0xF0):
        if c == 0xE0:
            size, count, start = buf[pos], buf[pos + 1], pos + 2
            end = pos + 1 + size
        else:
            size, count = _U32.unpack_from(buf, pos)[0], _U32.unpack_from(buf, pos + 4)[0]
            start, end = pos + 8, pos + 4 + size
        ctor = buf[start]
        out = []
        p = start + 1
        for _ in range(count):
            v, p = _value(ctor, buf, p)
            out.append(v)
        return out, end
    width = _FIXED.get(c)
    if width is None:
        raise ValueError(f"unknown constructor 0x{c:02x}")
    return bytes(buf[pos : pos + width]), pos + width


def _items(buf: bytes | memoryview, pos: int, count: int, as_map: bool) -> Any:
    items = []
    for _ in range(count):
        v, pos = decode(buf, pos)
        items.append(v)
    if as_map:
        return dict(zip(items[::2], items[1::2], strict=False))
    return items


class FrameReader:
    """Splits AMQP 1.0 frames (and the 8-byte protocol headers) out of a byte stream."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        """`(frame_type, channel, body)` per complete frame; a protocol header comes back as
        (-1, 0, header)."""
        buf = self._buf
        buf += data
        out = []
        pos = 0
        n = len(buf)
        while n - pos >= 8:
            if buf[pos : pos + 4] == b"AMQP":
                out.append((-1, 0, bytes(buf[pos : pos + 8])))
                pos += 8
                continue
            size, doff, ftype, channel = _FRAME_HEAD.unpack_from(buf, pos)
            if n - pos < size:
                break
            out.append((ftype, channel, bytes(buf[pos + doff * 4 : pos + size])))
            pos += size
        del buf[:pos]
        return out


def performative_of(body: bytes) -> tuple[int, list[Any], int]:
    """(descriptor code, fields, offset of the payload) of a frame body (empty: heartbeat)."""
    if not body:
        return -1, [], 0
    value, end = decode(body, 0)
    assert isinstance(value, Described)
    fields = value.value if isinstance(value.value, list) else []
    return value.code, fields, end


def transfer_id(body: bytes) -> int:
    """The delivery-id of a transfer (the fast path: fields 0 and 1 only)."""
    # 00 53 14, then a list8/list32 header, then handle, then delivery-id
    pos = 6 if body[3] == 0xC0 else 12
    c = body[pos]
    pos += 1 if c == 0x43 else 2 if c == 0x52 else 5
    c = body[pos]
    if c == 0x43:
        return 0
    if c == 0x52:
        return body[pos + 1]
    return int(_U32.unpack_from(body, pos + 1)[0])
