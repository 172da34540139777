"""Chunks as the stream protocol delivers them (RabbitMQ's Osiris chunk format).

A `Deliver` frame carries one chunk: a 48-byte header, then the entries. The header, big
endian: magic and version in one byte (0x50: magic 5, version 0), chunk type (0: user data),
entry count (u16), record count (u32), timestamp (i64, ms), epoch (u64), first offset (u64),
the CRC-32 of the data (clients check it), data length (u32), trailer length (u32) and four
reserved bytes. A simple entry is ``[u32 size, top bit 0][message]``.

Pure: no I/O, no clock; imports nothing from ringmq.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import Final

from ringmq.streamproto.codec import Key

MAGIC_VERSION: Final = 0x50
CHUNK_USER: Final = 0
_HEADER: Final = struct.Struct(">BBHIqQQIIII")
_DELIVER: Final = struct.Struct(">IHHB")  # frame size, key, version, subscription id
_SIZE: Final = struct.Struct(">I")


def chunk(first_offset: int, timestamp_ms: int, messages: Sequence[bytes], epoch: int = 1) -> bytes:
    """One chunk of `messages` (simple entries) starting at `first_offset`."""
    data = b"".join(p for m in messages for p in (_SIZE.pack(len(m)), m))
    n = len(messages)
    head = _HEADER.pack(
        MAGIC_VERSION,
        CHUNK_USER,
        n,
        n,
        timestamp_ms,
        epoch,
        first_offset,
        zlib.crc32(data),
        len(data),
        0,
        0,
    )
    return head + data


def deliver_frame(subscription_id: int, chunk_bytes: bytes) -> bytes:
    """The `Deliver` frame (version 1) of one chunk for a subscription."""
    head = _DELIVER.pack(len(chunk_bytes) + 5, Key.DELIVER, 1, subscription_id)
    return head + chunk_bytes


def deliver_header(subscription_id: int, chunk_size: int) -> bytes:
    """The header of the `Deliver` frame (version 1) of a chunk of `chunk_size` bytes."""
    return _DELIVER.pack(chunk_size + 5, Key.DELIVER, 1, subscription_id)
