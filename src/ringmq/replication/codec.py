"""The replication protocol's frames: bytes in, frames out (sans-IO).

Frames are `ringmq.lenframes` frames (`[u32 length][u8 type][payload]`, big endian); strings
are `u16 length + UTF-8`. The frames, in the order a session uses them:

* `Hello` (follower -> leader): protocol version, shard id, node name, the epoch and position
  the follower holds, a random nonce and `HMAC-SHA256(secret, ...)` over all of it: the
  cluster secret authenticates the follower without crossing the wire.
* `Welcome` (leader): the leader's epoch, the position that epoch began after, its position.
  `Refuse` (either side): why the session ends (bad secret, other shard, stale epoch).
* Bulk sync: `Index` (leader: epoch, the log position the copy starts from, every file with
  size and crc32), `Want` (follower: the files it lacks or holds differently), `Chunk`
  (leader: bytes of a file at an offset), `Synced` (leader: the copy is complete).
* `Records` (leader): the epoch and the position of the first record, then file operations
  (`storage.shardlog.FileOp`). An empty `Records` announces an epoch from that position.
* `Ack` (follower): the epoch, the position written, the position fsynced.
* `NeedSync` (follower): it cannot take the stream from where the leader starts (a divergent
  tail it cannot cut back, a gap): the leader answers with a bulk sync.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass
from typing import Final, TypeAlias

from ringmq import lenframes
from ringmq.lenframes import HEADER, U16, U32, Cursor, ProtocolError, blob, text
from ringmq.storage.shardlog import FileEntry, FileOp, OpKind

__all__ = ["FrameReader", "ProtocolError", "decode", "encode"]

VERSION: Final = 1
MAX_FRAME: Final = 1024 * 1024 * 1024 + 4096
"""Largest frame accepted. Chunks and batches of records stay near `CHUNK_BYTES`, but one
record is one write of the store and is never split (a body of up to RabbitMQ's largest
`max_message_size`, 512 MiB, is written at once); the peer is authenticated."""
CHUNK_BYTES: Final = 1024 * 1024
"""Bulk sync file chunks and record batches stay around this size."""

_U64 = struct.Struct(">Q")
_U64X2 = struct.Struct(">QQ")
_U64X3 = struct.Struct(">QQQ")
_ENTRY = struct.Struct(">QI")
_OP = struct.Struct(">BQI")


@dataclass(frozen=True, slots=True)
class Hello:
    shard: str
    node: str
    epoch: int
    position: int
    nonce: bytes
    mac: bytes
    version: int = VERSION


@dataclass(frozen=True, slots=True)
class Welcome:
    epoch: int
    start: int
    position: int


@dataclass(frozen=True, slots=True)
class Refuse:
    reason: str


@dataclass(frozen=True, slots=True)
class Index:
    epoch: int
    position: int
    entries: tuple[FileEntry, ...]


@dataclass(frozen=True, slots=True)
class Want:
    paths: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Chunk:
    path: str
    offset: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Synced:
    pass


@dataclass(frozen=True, slots=True)
class Records:
    epoch: int
    first: int
    ops: tuple[FileOp, ...]


@dataclass(frozen=True, slots=True)
class Ack:
    epoch: int
    written: int
    durable: int


@dataclass(frozen=True, slots=True)
class NeedSync:
    pass


Frame: TypeAlias = (
    Hello | Welcome | Refuse | Index | Want | Chunk | Synced | Records | Ack | NeedSync
)

_TYPES: Final[dict[type, int]] = {
    Hello: 1,
    Welcome: 2,
    Refuse: 3,
    Index: 4,
    Want: 5,
    Chunk: 6,
    Synced: 7,
    Records: 8,
    Ack: 9,
    NeedSync: 10,
}


def hello_mac(
    secret: bytes, shard: str, node: str, epoch: int, position: int, nonce: bytes
) -> bytes:
    """The MAC a `Hello` carries (HMAC-SHA256 of its fields under the cluster secret)."""
    msg = b"\x00".join(
        (b"ringmq-replication-1", shard.encode(), node.encode(), _U64X2.pack(epoch, position))
    )
    return hmac.new(secret, msg + nonce, hashlib.sha256).digest()


def encode(frame: Frame) -> bytes:
    """One frame's bytes."""
    match frame:
        case Hello():
            body = (
                U16.pack(frame.version)
                + text(frame.shard)
                + text(frame.node)
                + _U64X2.pack(frame.epoch, frame.position)
                + blob(frame.nonce)
                + blob(frame.mac)
            )
        case Welcome():
            body = _U64X3.pack(frame.epoch, frame.start, frame.position)
        case Refuse():
            body = text(frame.reason[:1000])
        case Index():
            parts = [_U64X2.pack(frame.epoch, frame.position), U32.pack(len(frame.entries))]
            for e in frame.entries:
                parts += (text(e.path), _ENTRY.pack(e.size, e.crc))
            body = b"".join(parts)
        case Want():
            body = U32.pack(len(frame.paths)) + b"".join(text(p) for p in frame.paths)
        case Chunk():
            body = text(frame.path) + _U64.pack(frame.offset) + frame.data
        case Synced() | NeedSync():
            body = b""
        case Records():
            # the records' data is most of a leader's output: copied once, into the frame
            parts = [b"", _U64X2.pack(frame.epoch, frame.first), U32.pack(len(frame.ops))]
            size = 1 + _U64X2.size + U32.size
            for op in frame.ops:
                path = text(op.path)
                parts += (path, _OP.pack(op.kind, op.offset, len(op.data)), op.data)
                size += len(path) + _OP.size + len(op.data)
            parts[0] = HEADER.pack(size, _TYPES[Records])
            return b"".join(parts)
        case Ack():
            body = _U64X3.pack(frame.epoch, frame.written, frame.durable)
    return lenframes.frame(_TYPES[type(frame)], body)


def decode(ftype: int, payload: memoryview) -> Frame:
    """The frame of type `ftype` with `payload` (raises `ProtocolError`)."""
    c = Cursor(payload)
    frame: Frame
    match ftype:
        case 1:
            (version,) = c.unpack(U16)
            shard, node = c.text(), c.text()
            epoch, position = c.unpack(_U64X2)
            frame = Hello(shard, node, epoch, position, c.blob(), c.blob(), version)
        case 2:
            frame = Welcome(*c.unpack(_U64X3))
        case 3:
            frame = Refuse(c.text())
        case 4:
            epoch, position = c.unpack(_U64X2)
            (n,) = c.unpack(U32)
            entries = []
            for _ in range(n):
                path = c.text()
                size, crc = c.unpack(_ENTRY)
                entries.append(FileEntry(path, size, crc))
            frame = Index(epoch, position, tuple(entries))
        case 5:
            (n,) = c.unpack(U32)
            frame = Want(tuple(c.text() for _ in range(n)))
        case 6:
            path = c.text()
            (offset,) = c.unpack(_U64)
            frame = Chunk(path, offset, c.rest())
        case 7:
            frame = Synced()
        case 8:
            epoch, first = c.unpack(_U64X2)
            (n,) = c.unpack(U32)
            ops = []
            for _ in range(n):
                path = c.text()
                kind, offset, size = c.unpack(_OP)
                try:
                    op_kind = OpKind(kind)
                except ValueError as exc:
                    raise ProtocolError(f"unknown operation {kind}") from exc
                ops.append(FileOp(op_kind, path, offset, bytes(c.take(size))))
            frame = Records(epoch, first, tuple(ops))
        case 9:
            frame = Ack(*c.unpack(_U64X3))
        case 10:
            frame = NeedSync()
        case _:
            raise ProtocolError(f"unknown frame type {ftype}")
    c.end()
    return frame


class FrameReader(lenframes.FrameReader[Frame]):
    """Bytes in, replication frames out: `feed(data)`, then `next_frame()` until None."""

    def __init__(self) -> None:
        super().__init__(decode, MAX_FRAME)
