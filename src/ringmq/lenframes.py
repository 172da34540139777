"""Typed, length-prefixed frames: the framing ringmq's own peer protocols share (sans-IO).

Every frame is `[u32 length][u8 type][payload]`, big endian; `length` counts the type byte and
the payload. The replication protocol (`ringmq.replication.codec`, node to node) and the shard
link (`ringmq.shardlink.codec`, shard to shard) use it; each names its own frame types and
decodes its own payloads with a `Cursor`.

`FrameReader(decode)` buffers received bytes and hands each complete frame's type and payload
to `decode`, which returns the frame value; a length out of range or a payload `decode`
refuses raises `ProtocolError`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final, Generic, TypeVar

HEADER: Final = struct.Struct(">IB")
U16: Final = struct.Struct(">H")
U32: Final = struct.Struct(">I")

F = TypeVar("F")


class ProtocolError(Exception):
    """Bytes that are not a valid frame, or a frame out of place."""


def text(value: str) -> bytes:
    """A string as `u16 length + UTF-8`."""
    raw = value.encode()
    return U16.pack(len(raw)) + raw


def blob(data: bytes) -> bytes:
    """Bytes as `u32 length + bytes`."""
    return U32.pack(len(data)) + data


def frame(ftype: int, body: bytes) -> bytes:
    """One frame of type `ftype` around `body`."""
    return HEADER.pack(len(body) + 1, ftype) + body


class Cursor:
    """Reads a frame's payload front to back; every read past the end raises `ProtocolError`."""

    __slots__ = ("at", "view")

    def __init__(self, view: memoryview) -> None:
        self.view = view
        self.at = 0

    def take(self, n: int) -> memoryview:
        if self.at + n > len(self.view):
            raise ProtocolError("frame too short")
        out = self.view[self.at : self.at + n]
        self.at += n
        return out

    def unpack(self, s: struct.Struct) -> tuple[int, ...]:
        return s.unpack(self.take(s.size))

    def text(self) -> str:
        (n,) = self.unpack(U16)
        try:
            return str(self.take(n), "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError("bad UTF-8") from exc

    def blob(self) -> bytes:
        (n,) = self.unpack(U32)
        return bytes(self.take(n))

    def rest(self) -> bytes:
        out = bytes(self.view[self.at :])
        self.at = len(self.view)
        return out

    def end(self) -> None:
        if self.at != len(self.view):
            raise ProtocolError("trailing bytes in frame")


class FrameReader(Generic[F]):
    """Bytes in, frames out: `feed(data)`, then `next_frame()` until it returns None."""

    def __init__(self, decode: Callable[[int, memoryview], F], max_frame: int) -> None:
        self._decode = decode
        self._max = max_frame
        self._buf = bytearray()
        self._at = 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes."""
        if self._at:
            del self._buf[: self._at]
            self._at = 0
        self._buf += data

    def next_frame(self) -> F | None:
        """The next complete frame, or None when more bytes are needed."""
        if len(self._buf) - self._at < HEADER.size:
            return None
        length, ftype = HEADER.unpack_from(self._buf, self._at)
        if length < 1 or length > self._max:
            raise ProtocolError(f"bad frame length {length}")
        end = self._at + 4 + length
        if len(self._buf) < end:
            return None
        with memoryview(self._buf) as view, view[self._at + HEADER.size : end] as payload:
            out = self._decode(ftype, payload)
        self._at = end
        return out
