"""Record framing and payload codecs shared by every ringmq file format.

Every file the storage layer writes (journal segments, message-store files, page files, the
definitions log) is a sequence of framed records::

    [u32 len][u32 crc32][u8 type][payload: len bytes]       (little endian)

`len` counts the payload only; `crc32` covers the type byte and the payload, so a torn write,
a zero-filled tail or a flipped bit is detected and the scan stops at the last good record.
Page files use the same header with CRC-32C in the checksum field (`page_crc`, below).
`scan()` returns the good records and the offset where the good prefix ends; callers truncate
there (journal, definitions) or simply stop (page files).

Payload codecs for message entries live here too, so the journal and the page files share one
layout (`encode_entry`/`decode_entry`).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final

from crc32c import crc32c

from ringmq.amqp.tables import decode_table, encode_table
from ringmq.core.message import Message, SeqId

HEADER: Final = struct.Struct("<IIB")
HEADER_SIZE: Final = HEADER.size
MAX_RECORD: Final = 1 << 30  # a larger length can only be garbage (frame_max is far below)


class RecordType(IntEnum):
    """Record types; values are part of the on-disk format."""

    ENQUEUE = 1
    ACK = 2
    DELIVERY_COUNT = 3
    PURGE = 4
    TX_BEGIN = 5
    TX_COMMIT = 6
    BODY = 7
    DEFINITION_PUT = 8
    DEFINITION_DELETE = 9
    PAGED = 10
    PAGED_REF = 11
    DEDUP_ADD = 12
    DEDUP_DISCARD = 13
    PAGED_RUN = 14  # page files: a run of plain messages as columns (pageruns.py)
    STREAM_CHUNK = 15  # stream segment files: one chunk of a stream queue (streamfiles.py)
    STREAM_OSIRIS = 16  # stream segment files: a chunk kept as published (core/streamchunk.py)


# crc32 of the single type byte, the starting value for crc32(payload)
TYPE_CRC: Final = tuple(zlib.crc32(bytes((t,))) for t in range(256))

# Page files (paging.py: transient, wiped when the broker starts) frame their records with the
# same header, but the checksum is CRC-32C (Castagnoli), which the `crc32c` package computes
# with the CPU's CRC instruction: about five times zlib's crc32 on this project's machines
# (docs/storage.md). Every page record is checked on each read (page-in and browse), so this
# is a per-message cost of every paged read. The journal and the other durable files keep
# zlib's crc32: their format does not change.
page_crc: Final = crc32c
"""`page_crc(data, start)`: the CRC-32C of `data` continuing from `start`."""
PAGE_TYPE_CRC: Final = tuple(crc32c(bytes((t,))) for t in range(256))
"""CRC-32C of the single type byte: the starting value for `page_crc(payload, ...)`."""


def frame(rtype: int, payload: bytes | bytearray | memoryview) -> bytes:
    """Frame one record: header (length, crc32 over type+payload, type) and payload."""
    crc = zlib.crc32(payload, TYPE_CRC[rtype])
    return HEADER.pack(len(payload), crc, rtype) + bytes(payload)


def scan(data: bytes | bytearray | memoryview, start: int = 0) -> tuple[list[Record], int]:
    """Parse framed records from `data[start:]`.

    Returns:
        The well-formed records in order, and the offset just past the last good one. When the
        offset is below `len(data)`, the rest is a torn or corrupt tail.
    """
    view = memoryview(data)
    out: list[Record] = []
    pos = start
    end = len(view)
    unpack = HEADER.unpack_from
    crc32 = zlib.crc32
    type_crc = TYPE_CRC
    append = out.append
    while pos + HEADER_SIZE <= end:
        length, crc, rtype = unpack(view, pos)
        body_at = pos + HEADER_SIZE
        if length > MAX_RECORD or body_at + length > end:
            break
        payload = view[body_at : body_at + length]
        if crc32(payload, type_crc[rtype]) != crc:
            break
        append(Record(rtype, payload, pos))
        pos = body_at + length
    return out, pos


@dataclass(slots=True)
class Record:
    """One framed record as read back: its type, payload view and file offset."""

    rtype: int
    payload: memoryview
    offset: int


def iter_scan(data: bytes | bytearray | memoryview) -> Iterator[Record]:
    """Iterate the good records of `data` (stops silently at a bad tail)."""
    records, _ = scan(data)
    yield from records


# ---------------------------------------------------------------------------------------------
# Message entries (ENQUEUE in the journal, PAGED in page files)

_ENTRY: Final = struct.Struct("<QBBIqqqqBBBHI")
# seq, flags, priority, delivery_count, timestamp_ms, expiry_ms, due_ms, expiration_ms,
# len(exchange), len(routing_key), len(message_id), len(queue) | form << 8, len(properties_bin)
#
# The u16 after the message id's length holds the queue name's length in its low byte (AMQP
# names are at most 255 bytes) and the message's form (`Message.form`: 0 AMQP 0-9-1, 1 AMQP
# 1.0, ...) in its high byte. Records written before forms existed have 0 there: form 0.
_ENTRY_SIZE: Final = _ENTRY.size
_NAME_MAX: Final = 0xFF
_REF: Final = struct.Struct("<Q")

F_EMBEDDED: Final = 0x01
F_EXPIRY: Final = 0x02
F_DUE: Final = 0x04
F_EXPIRATION: Final = 0x08
F_MESSAGE_ID: Final = 0x10
F_PERSISTENT: Final = 0x20
F_REDELIVERED: Final = 0x40
F_HEADERS: Final = 0x80  # an AMQP field table (u32 length + entries) follows the message id


@dataclass(slots=True)
class Entry:
    """A message as one queue holds it: the shared message plus per-queue state.

    `body_ref` is the shared message-store ref when the body lives there (then
    `message.body` may be empty until resolved), else 0.
    """

    queue: str
    seq: SeqId
    message: Message
    delivery_count: int = 0
    expiry_ms: int | None = None
    due_ms: int | None = None
    redelivered: bool = False
    body_ref: int = 0


def encode_entry(entry: Entry) -> bytes:
    """Encode an entry; the body is embedded unless `entry.body_ref` is set."""
    return encode_message(
        entry.queue,
        entry.seq,
        entry.message,
        entry.delivery_count,
        entry.expiry_ms,
        entry.due_ms,
        entry.redelivered,
        entry.body_ref,
    )


def encode_message(
    queue: str,
    seq: int,
    m: Message,
    delivery_count: int = 0,
    expiry_ms: int | None = None,
    due_ms: int | None = None,
    redelivered: bool = False,
    body_ref: int = 0,
    *,
    prefix: bytes = b"",
) -> bytes:
    """`encode_entry` without building an `Entry` (the publish hot path); `prefix` goes
    before the encoding in the same buffer (page files put the message's store ref there)."""
    exchange = m.exchange.encode()
    routing_key = m.routing_key.encode()
    message_id = m.message_id
    mid = message_id.encode() if message_id is not None else b""
    q = queue.encode()
    if len(q) > _NAME_MAX or not 0 <= m.form <= _NAME_MAX:
        raise ValueError(f"queue name of {len(q)} bytes or message form {m.form} out of range")
    flags = F_PERSISTENT if m.persistent else 0
    if body_ref == 0:
        flags |= F_EMBEDDED
    if expiry_ms is not None:
        flags |= F_EXPIRY
    if due_ms is not None:
        flags |= F_DUE
    if m.expiration_ms is not None:
        flags |= F_EXPIRATION
    if message_id is not None:
        flags |= F_MESSAGE_ID
    if redelivered:
        flags |= F_REDELIVERED
    headers = m.headers
    table = b""
    if headers is not None:
        flags |= F_HEADERS
        table = encode_table(headers) if headers else b"\x00\x00\x00\x00"
    props = m.properties_bin
    head = _ENTRY.pack(
        seq,
        flags,
        m.priority & 0xFF,
        delivery_count,
        m.timestamp_ms,
        expiry_ms or 0,
        due_ms or 0,
        m.expiration_ms or 0,
        len(exchange),
        len(routing_key),
        len(mid),
        len(q) | m.form << 8,
        len(props),
    )
    tail = m.body if body_ref == 0 else _REF.pack(body_ref)
    return b"".join((prefix, head, q, exchange, routing_key, mid, table, props, tail))


def decode_entry(payload: bytes | memoryview) -> Entry:
    """Decode `encode_entry` output. Bodies stored by ref come back empty with `body_ref` set."""
    data = bytes(payload)
    return decode_entry_at(data, 0, len(data))


def decode_entry_at(data: bytes, start: int, end: int) -> Entry:
    """`decode_entry` of the payload at `data[start:end]`, without copying it out first.

    Page reads decode records in place in the chunk they read; only the fields are copied.
    """
    (
        seq,
        flags,
        priority,
        delivery_count,
        timestamp_ms,
        expiry_ms,
        due_ms,
        expiration_ms,
        n_exchange,
        n_rk,
        n_mid,
        queue_form,
        n_props,
    ) = _ENTRY.unpack_from(data, start)
    n_queue = queue_form & _NAME_MAX
    a = start + _ENTRY_SIZE
    b = a + n_queue
    c = b + n_exchange
    d = c + n_rk
    e = d + n_mid
    headers: dict[str, Any] | None = None
    if flags & F_HEADERS:
        headers, e = decode_table(data, e)
    f = e + n_props
    if flags & F_EMBEDDED:
        body = data[f:end]
        body_ref = 0
    else:
        body = b""
        (body_ref,) = _REF.unpack_from(data, f)
    message = Message(
        data[b:c].decode(),
        data[c:d].decode(),
        data[e:f],
        body,
        headers,
        priority,
        expiration_ms if flags & F_EXPIRATION else None,
        bool(flags & F_PERSISTENT),
        data[d : d + n_mid].decode() if flags & F_MESSAGE_ID else None,
        timestamp_ms,
        body_ref,
        queue_form >> 8,
    )
    return Entry(
        data[a:b].decode(),
        SeqId(seq),
        message,
        delivery_count,
        expiry_ms if flags & F_EXPIRY else None,
        due_ms if flags & F_DUE else None,
        bool(flags & F_REDELIVERED),
        body_ref,
    )


_TABLE_LEN: Final = struct.Struct(">I")  # AMQP field tables are big endian


def entry_head(payload: bytes | memoryview) -> tuple[bytes, int, int, int, int | None, int, int]:
    """The fields recovery needs from an ENQUEUE payload, without decoding the message.

    Returns ``(queue as bytes, seq, flags, delivery_count, due_ms or None, body_ref, body size)``;
    `body_ref` is 0 for an embedded body, whose size is then the rest of the payload (for a body
    in the message store the size is that of the stored body, unknown here: -1).
    """
    (
        seq,
        flags,
        _priority,
        delivery_count,
        _timestamp_ms,
        _expiry_ms,
        due_ms,
        _expiration_ms,
        n_exchange,
        n_rk,
        n_mid,
        queue_form,
        n_props,
    ) = _ENTRY.unpack_from(payload, 0)
    b = _ENTRY_SIZE + (queue_form & _NAME_MAX)
    e = b + n_exchange + n_rk + n_mid
    if flags & F_HEADERS:
        (n_table,) = _TABLE_LEN.unpack_from(payload, e)
        e += 4 + n_table
    f = e + n_props
    queue = bytes(payload[_ENTRY_SIZE:b])
    due = due_ms if flags & F_DUE else None
    if flags & F_EMBEDDED:
        return queue, seq, flags, delivery_count, due, 0, len(payload) - f
    (ref,) = _REF.unpack_from(payload, f)
    return queue, seq, flags, delivery_count, due, ref, -1


def entry_row_at(
    data: bytes, start: int, end: int
) -> tuple[int, int | None, int, bytes, bytes, bytes, bytes] | None:
    """The fields a columnar browse returns from the entry at `data[start:end]`, copied out as
    the record holds them, without decoding the message (`decode_entry_at` builds it).

    Returns ``(seq, expiry_ms or None, timestamp_ms, exchange, routing key, properties,
    body)``, the last four as bytes (exchange and routing key UTF-8); the body is empty when
    it is stored by reference. None for a message of another form than AMQP 0-9-1's (form 0):
    the caller takes that one's columns from the decoded message.
    """
    (
        seq,
        flags,
        _priority,
        _delivery_count,
        timestamp_ms,
        expiry_ms,
        _due_ms,
        _expiration_ms,
        n_exchange,
        n_rk,
        n_mid,
        queue_form,
        n_props,
    ) = _ENTRY.unpack_from(data, start)
    if queue_form > _NAME_MAX:
        return None
    c = start + _ENTRY_SIZE + queue_form
    d = c + n_exchange
    e = d + n_rk + n_mid
    if flags & F_HEADERS:
        (n_table,) = _TABLE_LEN.unpack_from(data, e)
        e += 4 + n_table
    f = e + n_props
    return (
        seq,
        expiry_ms if flags & F_EXPIRY else None,
        timestamp_ms,
        data[c:d],
        data[d : d + n_rk],
        data[e:f],
        data[f:end] if flags & F_EMBEDDED else b"",
    )


# ---------------------------------------------------------------------------------------------
# Small payloads: ACK, DELIVERY_COUNT (with a delayed redelivery's due time), PURGE, BODY,
# PAGED_REF

_QLEN: Final = struct.Struct("<H")
_U32: Final = struct.Struct("<I")
_U64: Final = struct.Struct("<Q")
_SEQ_COUNT: Final = struct.Struct("<QI")
_I64: Final = struct.Struct("<q")  # a due time, signed as in ENQUEUE records


def _queue_prefix(queue: str) -> bytes:
    raw = queue.encode()
    return _QLEN.pack(len(raw)) + raw


def _read_queue(view: memoryview) -> tuple[str, int]:
    (n,) = _QLEN.unpack_from(view, 0)
    return str(view[2 : 2 + n], "utf-8"), 2 + n


def encode_ack(queue: str, seqs: list[int]) -> bytes:
    """ACK payload: queue, count, then that many u64 seq ids."""
    return _queue_prefix(queue) + _U32.pack(len(seqs)) + struct.pack(f"<{len(seqs)}Q", *seqs)


def decode_ack(payload: memoryview) -> tuple[str, tuple[int, ...]]:
    """Decode an ACK payload."""
    queue, pos = _read_queue(payload)
    (n,) = _U32.unpack_from(payload, pos)
    return queue, struct.unpack_from(f"<{n}Q", payload, pos + 4)


def encode_delivery(queue: str, seq: int, count: int, due_ms: int | None = None) -> bytes:
    """DELIVERY_COUNT payload: queue, seq, new delivery count, then, for a delayed redelivery
    (Artemis' `redelivery-delay`), the due time it waits for (i64 epoch ms).

    The record states the message's schedule from then on, as an ENQUEUE's `F_DUE` does at
    publish: with a due time the message waits for it again after a restart; without one it
    waits for nothing (a delivery ends any earlier wait). Records written before due times
    existed end after the count: no due time.
    """
    head = _queue_prefix(queue) + _SEQ_COUNT.pack(seq, count)
    return head if due_ms is None else head + _I64.pack(due_ms)


def decode_delivery(payload: memoryview) -> tuple[str, int, int, int | None]:
    """Decode a DELIVERY_COUNT payload: (queue, seq, count, due_ms or None)."""
    queue, pos = _read_queue(payload)
    seq, count = _SEQ_COUNT.unpack_from(payload, pos)
    pos += _SEQ_COUNT.size
    if len(payload) >= pos + _I64.size:
        (due_ms,) = _I64.unpack_from(payload, pos)
        return queue, seq, count, due_ms
    return queue, seq, count, None


def encode_purge(queue: str, upto_seq: int) -> bytes:
    """PURGE payload: drop every message of `queue` with seq <= upto_seq."""
    return _queue_prefix(queue) + _U64.pack(upto_seq)


def decode_purge(payload: memoryview) -> tuple[str, int]:
    """Decode a PURGE payload."""
    queue, pos = _read_queue(payload)
    (upto,) = _U64.unpack_from(payload, pos)
    return queue, upto


def encode_body(ref: int, body: bytes) -> bytes:
    """BODY payload (shared message store): ref then the body bytes."""
    return _U64.pack(ref) + body


def decode_body_ref(payload: memoryview) -> int:
    """The ref of a BODY payload (the body is `payload[8:]`)."""
    (ref,) = _U64.unpack_from(payload, 0)
    return int(ref)


BODY_PREFIX: Final = _U64.size


_PAGED_REF: Final = struct.Struct("<QI")


def encode_paged_ref(seq: int, size: int) -> bytes:
    """PAGED_REF payload (page files): a paged message whose durable copy is in the journal."""
    return _PAGED_REF.pack(seq, size)


def decode_paged_ref(payload: memoryview) -> tuple[int, int]:
    """Decode a PAGED_REF payload: (seq, body size)."""
    seq, size = _PAGED_REF.unpack_from(payload, 0)
    return seq, size
