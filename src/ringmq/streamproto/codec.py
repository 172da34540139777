"""The RabbitMQ stream protocol's wire format: frames in, commands out; replies in, bytes out.

Theory of operation
-------------------
Per `deps/rabbitmq_stream/docs/PROTOCOL.adoc` in rabbitmq-server: every frame is
``[u32 size][u16 key][u16 version][content]`` (big endian, `size` counts what follows it); a
response sets the key's high bit (0x8000). Strings are ``[i16 length][utf-8]`` (-1: null),
bytes ``[i32 length][data]``, arrays ``[i32 count][item]*``.

`FrameReader` cuts frames out of a byte stream (`feed`, then `next_frame` until None, h11's
"need data"); `decode` turns a client frame into one of the command dataclasses (a
`ProtocolError` for a malformed one: the connection then closes, as RabbitMQ does). The
`encode_*` functions build the server's frames. The command dataclasses are in `commands.py`,
chunks for `Deliver` in `chunk.py`.

Pure: no I/O, no clock; imports nothing from ringmq but its sibling `commands`.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Final

from ringmq.streamproto.commands import (
    Close,
    CloseOk,
    Command,
    ConsumerUpdateAnswer,
    Create,
    CreateSuperStream,
    Credit,
    DeclarePublisher,
    Delete,
    DeletePublisher,
    DeleteSuperStream,
    ExchangeCommandVersions,
    Heartbeat,
    Metadata,
    Open,
    Partitions,
    PeerProperties,
    Publish,
    QueryOffset,
    QueryPublisherSequence,
    Route,
    SaslAuthenticate,
    SaslHandshake,
    StoreOffset,
    StreamStats,
    Subscribe,
    Tune,
    Unsubscribe,
    Unsupported,
)

__all__ = [
    "RESPONSE",
    "Code",
    "FrameReader",
    "Key",
    "ProtocolError",
    "Writer",
    "decode",
]

RESPONSE: Final = 0x8000
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_I16 = struct.Struct(">h")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_HEAD = struct.Struct(">IHH")


class Key(IntEnum):
    """Command keys (PROTOCOL.adoc)."""

    DECLARE_PUBLISHER = 1
    PUBLISH = 2
    PUBLISH_CONFIRM = 3
    PUBLISH_ERROR = 4
    QUERY_PUBLISHER_SEQUENCE = 5
    DELETE_PUBLISHER = 6
    SUBSCRIBE = 7
    DELIVER = 8
    CREDIT = 9
    STORE_OFFSET = 10
    QUERY_OFFSET = 11
    UNSUBSCRIBE = 12
    CREATE = 13
    DELETE = 14
    METADATA = 15
    METADATA_UPDATE = 16
    PEER_PROPERTIES = 17
    SASL_HANDSHAKE = 18
    SASL_AUTHENTICATE = 19
    TUNE = 20
    OPEN = 21
    CLOSE = 22
    HEARTBEAT = 23
    ROUTE = 24
    PARTITIONS = 25
    CONSUMER_UPDATE = 26
    EXCHANGE_COMMAND_VERSIONS = 27
    STREAM_STATS = 28
    CREATE_SUPER_STREAM = 29
    DELETE_SUPER_STREAM = 30


class Code(IntEnum):
    """Response codes (PROTOCOL.adoc)."""

    OK = 1
    STREAM_DOES_NOT_EXIST = 2
    SUBSCRIPTION_ID_ALREADY_EXISTS = 3
    SUBSCRIPTION_ID_DOES_NOT_EXIST = 4
    STREAM_ALREADY_EXISTS = 5
    STREAM_NOT_AVAILABLE = 6
    SASL_MECHANISM_NOT_SUPPORTED = 7
    AUTHENTICATION_FAILURE = 8
    SASL_ERROR = 9
    SASL_CHALLENGE = 10
    SASL_AUTHENTICATION_FAILURE_LOOPBACK = 11
    VIRTUAL_HOST_ACCESS_FAILURE = 12
    UNKNOWN_FRAME = 13
    FRAME_TOO_LARGE = 14
    INTERNAL_ERROR = 15
    ACCESS_REFUSED = 16
    PRECONDITION_FAILED = 17
    PUBLISHER_DOES_NOT_EXIST = 18
    NO_OFFSET = 19


class ProtocolError(ValueError):
    """A frame that cannot be read (the connection closes)."""

    def __init__(self, code: Code, text: str) -> None:
        super().__init__(text)
        self.code = code


class FrameReader:
    """Cuts `(key, version, content)` frames out of received bytes."""

    def __init__(self, frame_max: int) -> None:
        self.frame_max = frame_max
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: bytes) -> None:
        """Append received bytes."""
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        self._buf += data

    def next_frame(self) -> tuple[int, int, bytes] | None:
        """The next whole frame, or None when more bytes are needed."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 4:
            self._compact()
            return None
        (size,) = _U32.unpack_from(buf, pos)
        if size < 4 or (self.frame_max and size > self.frame_max):
            raise ProtocolError(Code.FRAME_TOO_LARGE, f"frame of {size} bytes")
        if len(buf) - pos - 4 < size:
            self._compact()
            return None
        _, key, version = _HEAD.unpack_from(buf, pos)
        with memoryview(buf) as view:  # one copy (a bytearray slice would be a second)
            content = bytes(view[pos + 8 : pos + 4 + size])
        self._pos = pos + 4 + size
        return key, version, content

    def _compact(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0


class _In:
    """Reads the fields of one frame's content."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, s: struct.Struct) -> int:
        try:
            (v,) = s.unpack_from(self.data, self.pos)
        except struct.error:
            raise ProtocolError(Code.UNKNOWN_FRAME, "truncated frame") from None
        self.pos += s.size
        return int(v)

    def u8(self) -> int:
        return self._take(_U8)

    def u16(self) -> int:
        return self._take(_U16)

    def u32(self) -> int:
        return self._take(_U32)

    def i32(self) -> int:
        return self._take(_I32)

    def u64(self) -> int:
        return self._take(_U64)

    def i64(self) -> int:
        return self._take(_I64)

    def string(self) -> str:
        n = self._take(_I16)
        if n < 0:
            return ""
        return self.raw(n).decode("utf-8", errors="replace")

    def bytes_(self) -> bytes:
        n = self.i32()
        return b"" if n < 0 else self.raw(n)

    def raw(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise ProtocolError(Code.UNKNOWN_FRAME, "truncated frame")
        out = self.data[self.pos : end]
        self.pos = end
        return out

    def count(self) -> int:
        n = self.i32()
        if n < 0 or n > len(self.data):
            raise ProtocolError(Code.UNKNOWN_FRAME, f"bad array length {n}")
        return n

    def properties(self) -> dict[str, str]:
        return {self.string(): self.string() for _ in range(self.count())}


_ENTRY = struct.Struct(">QI")  # a publishing id, then a simple entry's size (top bit clear)
_BATCH_BIT: Final = 0x8000_0000  # an entry whose first bit is set is a sub-entry batch


def _publish(r: _In, version: int) -> Publish:
    pid = r.u8()
    n = r.count()
    if version < 2:  # a filter value per message from version 2: the general path
        got = _simple_entries(r.data, r.pos, n)
        if got is not None:
            ids, entries, r.pos = got
            return Publish(pid, ids, entries, content=r.data)
    return _publish_general(r, pid, n, version)


def _simple_entries(
    data: bytes, pos: int, n: int
) -> tuple[list[int], list[memoryview], int] | None:
    # The hot path of publishing: a v1 frame of simple entries. Per message one unpack of
    # the id and size and a view of the entry, nothing decoded or copied (the entries join
    # the chunk as they are); None when a sub-entry batch comes (`_publish_general`).
    ids: list[int] = []
    entries: list[memoryview] = []
    add_id, add_entry = ids.append, entries.append
    unpack = _ENTRY.unpack_from
    view = memoryview(data)
    try:
        for _ in range(n):
            pub_id, size = unpack(data, pos)
            if size & _BATCH_BIT:
                return None
            start = pos + 8
            pos = start + 4 + size
            add_id(pub_id)
            add_entry(view[start:pos])
    except struct.error:
        raise ProtocolError(Code.UNKNOWN_FRAME, "truncated frame") from None
    if pos > len(data):  # only the last entry can run past the end (else the unpack fails)
        raise ProtocolError(Code.UNKNOWN_FRAME, "truncated frame")
    return ids, entries, pos


def _publish_general(r: _In, pid: int, n: int, version: int) -> Publish:
    # Any publish frame, message by message: sub-entry batches (unpacked), filter values (v2).
    out = Publish(pid, content=r.data)
    ids, bodies, entries = out.ids, out.bodies, out.entries
    batches = False
    data_ = r.data
    view = memoryview(data_)
    total = len(data_)
    for _ in range(n):
        pub_id = r.u64()
        if version >= 2:
            r.string()  # the filter value: no stream filtering here
        first = data_[r.pos] if r.pos < len(data_) else 0
        if first & 0x80:  # a sub-entry batch: [type][u16 n][u32 size][u32 data size][data]
            batches = True
            kind = (r.u8() >> 4) & 0x07
            count = r.u16()
            r.u32()
            data = r.raw(r.u32())
            if kind != 0:
                out.refused.append(pub_id)
                continue
            sub = _In(data)
            for _ in range(count):
                ids.append(pub_id)
                bodies.append(sub.bytes_())
        else:  # a simple entry ([i32 size][message], size >= 0: the top bit is clear)
            start = r.pos
            if start + 4 > total:
                raise ProtocolError(Code.UNKNOWN_FRAME, "truncated frame")
            end = start + 4 + int.from_bytes(data_[start : start + 4])
            if end > total:
                raise ProtocolError(Code.UNKNOWN_FRAME, "truncated frame")
            ids.append(pub_id)
            bodies.append(data_[start + 4 : end])
            entries.append(view[start:end])
            r.pos = end
    if batches:
        entries.clear()
    else:
        bodies.clear()
    return out


def decode(key: int, version: int, content: bytes) -> Command:
    """The client command of a frame (ProtocolError when it cannot be read)."""
    r = _In(content)
    response = bool(key & RESPONSE)
    key &= ~RESPONSE
    cmd: Command
    if response:
        if key == Key.CLOSE:
            cmd = CloseOk(r.u32())
        elif key == Key.CONSUMER_UPDATE:
            corr, code, kind = r.u32(), r.u16(), r.u16()
            offset = r.u64() if len(content) - r.pos >= 8 else 0
            return ConsumerUpdateAnswer(corr, code, kind, offset)
        else:  # a response from the client to something this broker never asks
            return Unsupported(key | RESPONSE, None)
        return cmd
    match key:
        case Key.PEER_PROPERTIES:
            cmd = PeerProperties(r.u32(), r.properties())
        case Key.SASL_HANDSHAKE:
            cmd = SaslHandshake(r.u32())
        case Key.SASL_AUTHENTICATE:
            cmd = SaslAuthenticate(r.u32(), r.string(), r.bytes_())
        case Key.TUNE:
            cmd = Tune(r.u32(), r.u32())
        case Key.OPEN:
            cmd = Open(r.u32(), r.string())
        case Key.CLOSE:
            cmd = Close(r.u32(), r.u16(), r.string())
        case Key.HEARTBEAT:
            cmd = Heartbeat()
        case Key.CREATE:
            cmd = Create(r.u32(), r.string(), r.properties())
        case Key.DELETE:
            cmd = Delete(r.u32(), r.string())
        case Key.METADATA:
            corr = r.u32()
            cmd = Metadata(corr, [r.string() for _ in range(r.count())])
        case Key.DECLARE_PUBLISHER:
            cmd = DeclarePublisher(r.u32(), r.u8(), r.string(), r.string())
        case Key.DELETE_PUBLISHER:
            cmd = DeletePublisher(r.u32(), r.u8())
        case Key.QUERY_PUBLISHER_SEQUENCE:
            cmd = QueryPublisherSequence(r.u32(), r.string(), r.string())
        case Key.PUBLISH:
            cmd = _publish(r, version)
        case Key.SUBSCRIBE:
            corr, sid, stream, otype = r.u32(), r.u8(), r.string(), r.u16()
            offset = r.u64() if otype in (4, 5) else 0
            if otype == 5:  # a timestamp is signed
                offset = offset - (1 << 64) if offset >= 1 << 63 else offset
            credit = r.u16()
            props = r.properties() if r.pos < len(content) else {}
            cmd = Subscribe(corr, sid, stream, otype, offset, credit, props)
        case Key.UNSUBSCRIBE:
            cmd = Unsubscribe(r.u32(), r.u8())
        case Key.CREDIT:
            cmd = Credit(r.u8(), r.u16())
        case Key.STORE_OFFSET:
            cmd = StoreOffset(r.string(), r.string(), r.u64())
        case Key.QUERY_OFFSET:
            cmd = QueryOffset(r.u32(), r.string(), r.string())
        case Key.STREAM_STATS:
            cmd = StreamStats(r.u32(), r.string())
        case Key.EXCHANGE_COMMAND_VERSIONS:
            corr = r.u32()
            cmd = ExchangeCommandVersions(
                corr, [(r.u16(), r.u16(), r.u16()) for _ in range(r.count())]
            )
        case Key.ROUTE:
            cmd = Route(r.u32(), r.string(), r.string())
        case Key.PARTITIONS:
            cmd = Partitions(r.u32(), r.string())
        case Key.CREATE_SUPER_STREAM:
            corr, name = r.u32(), r.string()
            parts = [r.string() for _ in range(r.count())]
            keys = [r.string() for _ in range(r.count())]
            cmd = CreateSuperStream(corr, name, parts, keys, r.properties())
        case Key.DELETE_SUPER_STREAM:
            cmd = DeleteSuperStream(r.u32(), r.string())
        case _:
            has_corr = key not in (Key.PUBLISH_CONFIRM, Key.PUBLISH_ERROR, Key.DELIVER)
            return Unsupported(key, r.u32() if has_corr and len(content) >= 4 else None)
    if r.pos != len(content) and key != Key.SUBSCRIBE:
        raise ProtocolError(Code.UNKNOWN_FRAME, f"{len(content) - r.pos} extra bytes")
    return cmd


# --- server frames -----------------------------------------------------------------------------


class Writer:
    """Builds one frame's content, then the frame."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def u8(self, v: int) -> Writer:
        self.parts.append(_U8.pack(v))
        return self

    def u16(self, v: int) -> Writer:
        self.parts.append(_U16.pack(v))
        return self

    def u32(self, v: int) -> Writer:
        self.parts.append(_U32.pack(v))
        return self

    def u64(self, v: int) -> Writer:
        self.parts.append(_U64.pack(v))
        return self

    def i64(self, v: int) -> Writer:
        self.parts.append(v.to_bytes(8, "big", signed=True))
        return self

    def string(self, v: str) -> Writer:
        b = v.encode()
        self.parts += (_I16.pack(len(b)), b)
        return self

    def raw(self, v: bytes) -> Writer:
        self.parts.append(v)
        return self

    def count(self, n: int) -> Writer:
        self.parts.append(_I32.pack(n))
        return self

    def properties(self, props: dict[str, str]) -> Writer:
        self.count(len(props))
        for k, v in props.items():
            self.string(k).string(v)
        return self

    def frame(self, key: int, version: int = 1) -> bytes:
        content = b"".join(self.parts)
        return _HEAD.pack(len(content) + 4, key, version) + content


def response(key: Key, correlation_id: int, code: Code | int) -> Writer:
    """A response's content so far: correlation id and code (the caller adds the rest)."""
    return Writer().u32(correlation_id).u16(code)


def simple_response(key: Key, correlation_id: int, code: Code | int) -> bytes:
    """A response frame with only a correlation id and a code."""
    return response(key, correlation_id, code).frame(key | RESPONSE)
