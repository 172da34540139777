"""Stream chunks in RabbitMQ's Osiris format: kept as they arrived, sent as they are kept.

Theory of operation
-------------------
A stream-protocol publish frame of N messages becomes one chunk, stored in the format the
stream protocol delivers (Osiris'), so a stream-protocol consumer is sent the stored bytes
behind a small frame header: no message is decoded or rebuilt on either side (RabbitMQ does
the same). The chunk, big endian: a 48-byte header -- magic and version in one byte (0x50),
chunk type (0: user data), entry count (u16), record count (u32), timestamp (i64 ms), epoch
(u64), first offset (u64), CRC-32 of the data (clients check it), data length (u32), trailer
length (u32), four reserved bytes -- then the data: entries, a simple one being
``[u32 size, top bit 0][AMQP 1.0 message]``, a sub-entry batch ``[u8 0x80 | type << 4][u16
records][u32 uncompressed size][u32 size][records]``.

Messages published over the other protocols are kept as the core's messages (the logs'
other chunk form); a stream-protocol consumer gets them encoded into this format when read,
and the other protocols' consumers get a raw chunk's messages decoded. Both conversions are
the AMQP 1.0 adapter's (`register_entry_codec`, as `core.message.register_form`): the core
never imports a protocol.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from ringmq.core.message import Message

__all__ = [
    "HEADER",
    "HEADER_SIZE",
    "chunk_info",
    "decode_chunk",
    "encode_chunk",
    "gather",
    "osiris_chunk",
    "osiris_header",
    "register_entry_codec",
]

MAGIC_VERSION: Final = 0x50
CHUNK_USER: Final = 0
HEADER: Final = struct.Struct(">BBHIqQQIIII")
HEADER_SIZE: Final = HEADER.size  # 48
GATHER_MESSAGES: Final = 256
"""Most messages of the core's chunks sent as one chunk (`gather`)."""
_SIZE: Final = struct.Struct(">I")
_SUB: Final = struct.Struct(">BHII")  # sub-entry batch: type, records, uncompressed, size

Decode = Callable[[bytes, int, str], Message]
"""An entry's message bytes, the chunk's timestamp and the stream's name -> the core's message
(published to the default exchange with the stream's name as its routing key, as RabbitMQ
delivers a message published over the stream protocol to its other protocols' consumers)."""
Encode = Callable[[Message], bytes]
"""A core message -> the bytes of its entry (an AMQP 1.0 message)."""

_codec: list[tuple[Decode, Encode]] = []


def register_entry_codec(decode: Decode, encode: Encode) -> None:
    """Set the conversions between entries and core messages (the AMQP 1.0 adapter's)."""
    _codec[:] = [(decode, encode)]


def _the_codec() -> tuple[Decode, Encode]:
    if not _codec:
        raise RuntimeError("no stream entry codec registered (ringmq.adapters.amqp10.message)")
    return _codec[0]


def osiris_header(
    first_offset: int, timestamp_ms: int, entries: int, records: int, data: bytes
) -> bytes:
    """The header of the chunk of `data` starting at `first_offset` (the chunk: it, then
    `data`; a writer may put the two in place without joining them first)."""
    return HEADER.pack(
        MAGIC_VERSION, CHUNK_USER, entries, records, timestamp_ms, 1, first_offset,
        zlib.crc32(data), len(data), 0, 0,
    )  # fmt: skip


def osiris_chunk(
    first_offset: int, timestamp_ms: int, entries: int, records: int, data: bytes
) -> bytes:
    """The chunk of `data` (its entries as they arrived) starting at `first_offset`."""
    return osiris_header(first_offset, timestamp_ms, entries, records, data) + data


def chunk_info(chunk: bytes | memoryview, at: int = 0) -> tuple[int, int, int, int]:
    """(first offset, timestamp, record count, total size) of the chunk at `at`."""
    _mv, _t, _e, records, ts, _ep, first, _crc, dlen, tlen, _r = HEADER.unpack_from(chunk, at)
    return first, ts, records, HEADER_SIZE + dlen + tlen


def encode_chunk(first_offset: int, timestamp_ms: int, messages: Sequence[Message]) -> bytes:
    """Core messages as one chunk (simple entries)."""
    encode = _the_codec()[1]
    parts: list[bytes] = []
    for m in messages:
        b = encode(m)
        parts += (_SIZE.pack(len(b)), b)
    n = len(messages)
    return osiris_chunk(first_offset, timestamp_ms, n, n, b"".join(parts))


def decode_chunk(
    chunk: bytes | memoryview, skip: int = 0, stream: str = ""
) -> list[tuple[int, Message]]:
    """The (offset, message) of a chunk of stream `stream` from its `skip`-th record on
    (sub-entry batches without compression are unpacked; a compressed one's records are
    skipped)."""
    decode = _the_codec()[0]
    buf = bytes(chunk)
    _mv, _t, entries, _r, ts, _ep, first, _crc, dlen, _tl, _rs = HEADER.unpack_from(buf, 0)
    out: list[tuple[int, Message]] = []
    pos, end, i = HEADER_SIZE, HEADER_SIZE + dlen, 0
    for _ in range(entries):
        if pos >= end:
            break
        if buf[pos] & 0x80:
            kind, n, _u, size = _SUB.unpack_from(buf, pos)
            pos += _SUB.size
            if (kind >> 4) & 0x07 == 0:
                p = pos
                for _ in range(n):
                    (k,) = _SIZE.unpack_from(buf, p)
                    if i >= skip:
                        out.append((first + i, decode(buf[p + 4 : p + 4 + k], ts, stream)))
                    p += 4 + k
                    i += 1
            else:
                i += n
            pos += size
        else:
            (k,) = _SIZE.unpack_from(buf, pos)
            if i >= skip:
                out.append((first + i, decode(buf[pos + 4 : pos + 4 + k], ts, stream)))
            pos += 4 + k
            i += 1
    return out


def gather(
    chunks: Iterable[tuple[int, int, int, bytes | Sequence[Message]]], max_chunks: int
) -> list[tuple[int, int, bytes]]:
    """Up to `max_chunks` chunks to send, each (first offset, record count, bytes), from a
    log's chunks in order, each (first offset, timestamp, count, the chunk as stored or the
    core's messages): a stored chunk goes as it is; consecutive chunks of core messages (one
    per publish over the other protocols) stamped in the same millisecond go as one, up to
    `GATHER_MESSAGES` messages. Not across stamps: a chunk has one timestamp, which clients
    give each of its messages, and a reader starting at a message's timestamp must find it."""
    out: list[tuple[int, int, bytes]] = []
    held: list[Message] = []
    held_first = held_ts = 0
    for first, ts, count, body in chunks:
        if held and (
            isinstance(body, bytes) or ts != held_ts or len(held) + count > GATHER_MESSAGES
        ):
            out.append((held_first, len(held), encode_chunk(held_first, held_ts, held)))
            held = []
        if len(out) >= max_chunks:
            return out
        if isinstance(body, bytes):
            out.append((first, count, body))
            if len(out) >= max_chunks:
                return out
        else:
            if not held:
                held_first, held_ts = first, ts
            held += body
    if held:
        out.append((held_first, len(held), encode_chunk(held_first, held_ts, held)))
    return out
