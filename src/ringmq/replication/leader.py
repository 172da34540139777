"""The leader's side of one follower's session (sans-IO).

Theory of operation
-------------------
`LeaderSession` owns one follower connection's protocol state; the server feeds it the bytes
the follower sent (`receive_data`), calls `pump()` when the shard log grew, and writes
`data_to_send()` to the socket. It reads the shard's log (`storage.shardlog.ShardLog`, via
`LogView`) and never touches a file: a bulk sync's file index and file contents are produced
by the server (off the loop) and handed in (`index`, `chunk`, `files_done`) when the session
asks for them with the events `NeedIndex` and `SendFiles`.

States: `HELLO` (waiting for the follower's hello) -> `INDEXING` (waiting for the server's
file index) -> `WANT` (index sent, waiting for the follower's list) -> `COPYING` (the server
sends file chunks) -> `STREAMING` (records after `sent`); any state -> `CLOSED` on a refusal
or a protocol error. A follower that falls behind what the log still holds goes back through
a bulk sync.

Where streaming starts (the hello's epoch and position against the leader's):

* the leader's epoch: from the follower's position, when the log still holds it;
* an earlier epoch whose end this leader knows (`ends`, epoch -> the position it ended at):
  from the smaller of the follower's position and that end; the first `Records` frame carries
  the new epoch and its first position, and the follower cuts back what it holds beyond (a
  divergent tail) or asks for a bulk sync;
* otherwise (an epoch the leader does not know, a position ahead of the leader's): bulk sync;
* a *newer* epoch than the leader's: refused (this leader is stale: fencing).

Acknowledgements: `Ack(epoch, written, durable)` of the leader's epoch move `acked` and
`durable` forward (the positions confirms may wait for) and yield an `Acked` event.

Output: frames are kept as a list of encoded frames and joined only when taken (one copy of
each record's bytes between the log and the socket, none when one frame is waiting). Sessions
of one log may share a `FrameCache`: followers in step are sent the same `Records` frames, so
each is encoded once however many followers there are.

Imports: the codec and the shard log's value types only (no asyncio, no sockets, no files).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Final, Protocol, TypeAlias

from ringmq.replication.codec import (
    CHUNK_BYTES,
    VERSION,
    Ack,
    Chunk,
    Frame,
    FrameReader,
    Hello,
    Index,
    NeedSync,
    ProtocolError,
    Records,
    Refuse,
    Synced,
    Want,
    Welcome,
    encode,
    hello_mac,
)
from ringmq.storage.shardlog import FileEntry, FileOp

_MAX_SEND_BUFFER: Final = 4 * CHUNK_BYTES  # `pump` stops filling past this


class FrameCache:
    """The last few `Records` frames encoded for one epoch's log, shared by its sessions.

    A frame is named by (epoch, first position, number of records): records are immutable
    once appended, so two sessions asking for the same name get the same bytes.
    """

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._frames: dict[tuple[int, int, int], bytes] = {}

    def records(self, epoch: int, first: int, ops: Sequence[FileOp]) -> bytes:
        key = (epoch, first, len(ops))
        frame = self._frames.get(key)
        if frame is None:
            frame = encode(Records(epoch, first, tuple(ops)))
            self._frames[key] = frame
            if len(self._frames) > self.size:
                del self._frames[next(iter(self._frames))]  # the oldest
        return frame


class LogView(Protocol):
    """What a session reads of the shard log (`storage.shardlog.ShardLog`)."""

    @property
    def shard(self) -> str: ...
    @property
    def epoch(self) -> int: ...
    @property
    def start(self) -> int: ...
    @property
    def position(self) -> int: ...
    def since(self, position: int, limit: int = ...) -> list[FileOp] | None: ...


class State(Enum):
    HELLO = "hello"
    INDEXING = "indexing"
    WANT = "want"
    COPYING = "copying"
    STREAMING = "streaming"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class Authenticated:
    """The follower proved the secret; `node` is its name."""

    node: str


@dataclass(frozen=True, slots=True)
class NeedIndex:
    """The server should compute the file index (`shardlog.file_index`) and call `index`."""


@dataclass(frozen=True, slots=True)
class SendFiles:
    """The server should send these files' first `size` bytes (`chunk`), then `files_done`."""

    files: tuple[FileEntry, ...]


@dataclass(frozen=True, slots=True)
class Acked:
    """The follower acknowledged positions of the leader's epoch."""

    written: int
    durable: int


@dataclass(frozen=True, slots=True)
class Closed:
    """The session ended (`reason`); close the connection once the bytes are sent."""

    reason: str


Event: TypeAlias = Authenticated | NeedIndex | SendFiles | Acked | Closed


class LeaderSession:
    """One follower's session on the leader (see the module docstring).

    Args:
        log: the shard log.
        secret: the cluster secret the follower's hello must be signed with.
        ends: epoch -> the position it ended at, for earlier epochs this leader knows.
    """

    def __init__(
        self,
        log: LogView,
        secret: bytes,
        ends: Mapping[int, int] | None = None,
        frames: FrameCache | None = None,
    ) -> None:
        self.log = log
        self.frames = frames or FrameCache(1)
        self.secret = secret
        self.ends = dict(ends or {})
        self.state = State.HELLO
        self.node = ""
        self.sent = 0
        """Streaming: the last position sent."""
        self.acked = 0
        """The last position of the leader's epoch the follower wrote."""
        self.durable = 0
        """The last position of the leader's epoch the follower fsynced."""
        self.syncs = 0
        """Bulk syncs started."""
        self._reader = FrameReader()
        self._out: list[bytes] = []  # encoded frames, oldest first
        self._out_bytes = 0
        self._index: tuple[FileEntry, ...] = ()
        self._index_at = 0
        self._announce = False  # the next Records frame goes out even when empty (new epoch)
        self._claimed = 0  # the position the hello claimed in the leader's epoch

    # -- input ------------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[Event]:
        """Bytes from the follower; returns what the server must do."""
        if self.state is State.CLOSED:
            return []
        self._reader.feed(data)
        events: list[Event] = []
        try:
            while (frame := self._reader.next_frame()) is not None:
                events += self._handle(frame)
                if self.closed:
                    break
        except ProtocolError as exc:
            events += self._refuse(f"protocol error: {exc}")
        return events

    def _handle(self, frame: Frame) -> list[Event]:
        match frame:
            case Hello() if self.state is State.HELLO:
                return self._hello(frame)
            case Ack() if self.state is not State.HELLO:
                if frame.epoch != self.log.epoch:
                    return []
                if frame.written > max(self.sent, self._claimed):
                    return self._refuse("acknowledged a position never sent")
                self.acked = max(self.acked, frame.written)
                self.durable = max(self.durable, min(frame.durable, self.acked))
                return [Acked(self.acked, self.durable)]
            case Want() if self.state is State.WANT:
                wanted = set(frame.paths)
                files = tuple(e for e in self._index if e.path in wanted)
                if len(files) != len(wanted):
                    return self._refuse("asked for a file not in the index")
                self.state = State.COPYING
                return [SendFiles(files)]
            case NeedSync() if self.state is State.STREAMING:
                return self._bulk()
            case Refuse():
                self.state = State.CLOSED
                return [Closed(f"follower refused: {frame.reason}")]
        return self._refuse(f"unexpected {type(frame).__name__} in state {self.state.value}")

    def _hello(self, hello: Hello) -> list[Event]:
        log = self.log
        mac = hello_mac(
            self.secret, hello.shard, hello.node, hello.epoch, hello.position, hello.nonce
        )
        if not hmac.compare_digest(mac, hello.mac):
            return self._refuse("authentication failed (cluster secret)")
        if hello.version != VERSION:
            return self._refuse(f"protocol version {hello.version} not supported")
        if hello.shard != log.shard:
            return self._refuse(f"this node leads shard {log.shard!r}, not {hello.shard!r}")
        if hello.epoch > log.epoch:
            return self._refuse(
                f"stale leader: epoch {log.epoch} is older than the follower's {hello.epoch}"
            )
        self.node = hello.node
        self._emit(encode(Welcome(log.epoch, log.start, log.position)))
        events: list[Event] = [Authenticated(hello.node)]
        frm: int | None = None
        if hello.epoch == log.epoch:
            frm = self._claimed = min(hello.position, log.position)
        elif hello.epoch in self.ends:
            frm = min(hello.position, self.ends[hello.epoch])
            self._announce = True
        if frm is not None and log.since(frm, 0) is not None:
            self.state = State.STREAMING
            self.sent = frm
            self.pump()
            return events
        return events + self._bulk()

    def _bulk(self) -> list[Event]:
        self.state = State.INDEXING
        self.syncs += 1
        self._announce = False
        return [NeedIndex()]

    def _refuse(self, reason: str) -> list[Event]:
        self._emit(encode(Refuse(reason)))
        self.state = State.CLOSED
        return [Closed(reason)]

    # -- bulk sync --------------------------------------------------------------------------

    def index(self, position: int, entries: Sequence[FileEntry]) -> None:
        """The server's file index, taken when the log was at `position` (every operation up
        to it had reached the files)."""
        assert self.state is State.INDEXING
        self._index = tuple(entries)
        self._index_at = position
        self._emit(encode(Index(self.log.epoch, position, self._index)))
        self.state = State.WANT

    def chunk(self, path: str, offset: int, data: bytes) -> None:
        """Bytes of a file `SendFiles` named (read at any time after the index was taken)."""
        assert self.state is State.COPYING
        self._emit(encode(Chunk(path, offset, data)))

    def files_done(self) -> list[Event]:
        """Every wanted file was sent: stream from the index's position (or sync again when
        the log no longer holds it)."""
        assert self.state is State.COPYING
        self._emit(encode(Synced()))
        self.sent = self._index_at
        self.state = State.STREAMING
        if self.log.since(self.sent, 0) is None:
            return self._bulk()
        self.pump()
        return []

    # -- output -----------------------------------------------------------------------------

    def pump(self) -> list[Event]:
        """Move records the follower has not been sent into the output (up to a bound)."""
        if self.state is not State.STREAMING:
            return []
        log = self.log
        while self._out_bytes < _MAX_SEND_BUFFER and (self.sent < log.position or self._announce):
            ops = log.since(self.sent, 256)
            if ops is None:
                return self._bulk()  # fell behind what the log holds
            batch: list[FileOp] = []
            size = 0
            for op in ops:
                if batch and size + len(op.data) > CHUNK_BYTES:
                    break
                batch.append(op)
                size += len(op.data)
            self._emit(self.frames.records(log.epoch, self.sent + 1, batch))
            self.sent += len(batch)
            self._announce = False
        return []

    @property
    def closed(self) -> bool:
        """The session ended (send what is left, then close the connection)."""
        return self.state is State.CLOSED

    def data_to_send(self) -> bytes:
        """Bytes to write to the follower's socket."""
        out = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out.clear()
        self._out_bytes = 0
        return out

    def _emit(self, frame: bytes) -> None:
        self._out.append(frame)
        self._out_bytes += len(frame)

    @property
    def backlogged(self) -> int:
        """Bytes waiting in the output."""
        return self._out_bytes
