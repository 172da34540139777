"""The follower's side of a replication session (sans-IO).

Theory of operation
-------------------
`FollowerSession` owns the follower's protocol state for one connection to the leader. It
applies what arrives to its copy of the shard through a `ReplicaPort` (the store directory,
`storage.replica.Replica`; a dict in tests), synchronously: the follower has nothing else to
do, and acknowledging a position only after its operations were written is the point. The
server feeds it bytes (`receive_data`), writes `data_to_send()`, and, when fsync is asked for,
fsyncs what the port wrote and reports it with `synced(position)`.

What it holds: `epoch` and `position` (every operation up to `position` of the log of `epoch`
is in the files), `syncing` while a bulk sync rewrites the files. Saved with the port's `save`
at the end of a bulk sync and at each epoch change (and by the server now and then).

Rules:

* Fencing: a `Welcome` or `Records` of an epoch older than the follower's ends the session
  (a stale leader). A `Records` frame of a newer epoch whose first position is `p + 1` means
  the new leader's log and the follower's agree up to `p`: whatever the follower holds beyond
  `p` (a divergent tail written by a deposed leader) is cut back first, from the undo list
  (each append since the last bulk sync, delete or replace is undone by cutting its file
  back to its offset); when the list does not reach back that far the follower sends
  `NeedSync` and takes a bulk sync instead.
* Records of its own epoch must continue its position (`first <= position + 1`; records it
  already has are skipped); a gap asks for a bulk sync.
* Bulk sync: on `Index`, the follower compares the leader's files with its own (size and
  crc32), asks for those that differ (`Want`), writes the chunks, and on `Synced` cuts every
  file to the index's size and deletes the files the index does not name; it then holds the
  index's position.
* Every batch of records applied is acknowledged: `Ack(epoch, written, durable)`.

Invariant (tests/unit/replication/test_model.py): when not syncing, the follower's files are
the leader's files as they were at the follower's position of the leader's epoch, so the
follower's log is a prefix of the leader's.

Imports: the codec and the shard log's value types (no asyncio, sockets or files).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, Protocol, TypeAlias

from ringmq.replication.codec import (
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
from ringmq.storage.replica import ShardState
from ringmq.storage.shardlog import FileEntry, FileOp, OpKind

_UNDO_LIMIT: Final = 100_000  # appends remembered for cutting a divergent tail back


class ReplicaPort(Protocol):
    """The follower's copy of the shard (`storage.replica.Replica`)."""

    def apply(self, op: FileOp) -> None: ...
    def write_chunk(self, name: str, offset: int, data: bytes) -> None: ...
    def truncate(self, name: str, size: int) -> None: ...
    def remove(self, name: str) -> None: ...
    def index(self) -> list[FileEntry]: ...
    def finish_sync(self, entries: list[FileEntry]) -> None: ...
    def save(self, state: ShardState) -> None: ...


@dataclass(slots=True)
class UndoTail:
    """The appends applied since the last operation that cannot be undone (a delete, a
    replace, a bulk sync), newest last: what cutting a divergent tail back needs. Kept by the
    follower process across its reconnections (lost with the process: then a bulk sync)."""

    floor: int
    """The undo list reaches back to this position (no further)."""
    entries: list[tuple[int, str, int]] = field(default_factory=list)
    """(position, path, offset) of each append: the file is cut back to `offset`."""
    exact: bool = False
    """The files hold exactly the position (False after a restart: a saved position may lag
    the files, so only a bulk sync may take them to another epoch)."""


class State(Enum):
    WELCOME = "welcome"
    STREAMING = "streaming"
    SYNCING = "syncing"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class Progress:
    """Records were applied up to `position` of `epoch` (fsync it when asked, `synced`)."""

    epoch: int
    position: int


@dataclass(frozen=True, slots=True)
class SyncStarted:
    """A bulk sync began: `files` of the leader's files will be copied."""

    files: int


@dataclass(frozen=True, slots=True)
class SyncDone:
    """The bulk sync ended; the copy holds `position` of `epoch`."""

    epoch: int
    position: int


@dataclass(frozen=True, slots=True)
class Closed:
    """The session ended (`reason`); `fenced` when the leader was stale or refused us."""

    reason: str
    fenced: bool = False


Event: TypeAlias = Progress | SyncStarted | SyncDone | Closed


class FollowerSession:
    """The follower's side of one connection (see the module docstring).

    Args:
        replica: the copy the records are applied to.
        held: what the copy holds (from its `SHARD`; epoch 0, position 0 for an empty one).
        node: this follower's name; secret: the cluster secret.
        nonce: random bytes for the hello (the server draws them: no randomness here).
    """

    def __init__(
        self,
        replica: ReplicaPort,
        held: ShardState,
        node: str,
        secret: bytes,
        nonce: bytes,
        tail: UndoTail | None = None,
    ) -> None:
        self.replica = replica
        self.shard = held.shard
        self.epoch = held.epoch
        self.position = held.position
        self.durable = 0
        """The last position reported fsynced (`synced`)."""
        self.state = State.WELCOME
        self.leader_position = 0
        """The leader's position when it last said (`Welcome`, or the records received)."""
        self._reader = FrameReader()
        self._out = bytearray()
        if tail is None or held.syncing:
            tail = UndoTail(held.position if not held.syncing else -1)
        self.tail = tail
        """What cutting back a divergent tail needs (pass it to the next session)."""
        self._index: list[FileEntry] = []
        self._index_at = 0
        self._index_epoch = 0
        self._awaiting_index = False  # NeedSync sent: records are ignored until the Index
        # a copy whose bulk sync was cut short holds nothing reliable: ask for a new copy by
        # claiming nothing (epoch 0 is never a leader's), but keep the epoch for fencing
        epoch, position = (0, 0) if held.syncing else (held.epoch, held.position)
        self.syncing = held.syncing
        """The copy is in the middle of a bulk sync (its files are a mix: hold nothing)."""
        if held.syncing:
            self.position = 0
        mac = hello_mac(secret, held.shard, node, epoch, position, nonce)
        self._out += encode(Hello(held.shard, node, epoch, position, nonce, mac))

    def receive_data(self, data: bytes) -> list[Event]:
        """Bytes from the leader; returns what happened."""
        if self.state is State.CLOSED:
            return []
        self._reader.feed(data)
        events: list[Event] = []
        try:
            while (frame := self._reader.next_frame()) is not None:
                events += self._handle(frame)
                if self.closed:
                    break
        except (ProtocolError, ValueError) as exc:
            events += self._close(f"protocol error: {exc}")
        return events

    def _handle(self, frame: Frame) -> list[Event]:
        match frame:
            case Welcome() if self.state is State.WELCOME:
                if frame.epoch < self.epoch:
                    return self._close(
                        f"stale leader: epoch {frame.epoch} < {self.epoch}", fenced=True
                    )
                self.leader_position = frame.position
                self.state = State.STREAMING
                if frame.epoch == self.epoch and not self.syncing:
                    self._ack()  # what we hold counts before anything new arrives
                return []
            case Records() if self.state is State.STREAMING:
                if self._awaiting_index:
                    return []  # sent before the leader read our NeedSync
                return self._records(frame)
            case Index() if self.state is State.STREAMING:
                return self._begin_sync(frame)
            case Chunk() if self.state is State.SYNCING:
                self.replica.write_chunk(frame.path, frame.offset, frame.data)
                return []
            case Synced() if self.state is State.SYNCING:
                return self._end_sync()
            case Refuse():
                self.state = State.CLOSED
                return [Closed(f"leader refused: {frame.reason}", fenced=True)]
        return self._close(f"unexpected {type(frame).__name__} in state {self.state.value}")

    def _close(self, reason: str, *, fenced: bool = False) -> list[Event]:
        self._out += encode(Refuse(reason))
        self.state = State.CLOSED
        return [Closed(reason, fenced)]

    # -- streaming --------------------------------------------------------------------------

    def _records(self, rec: Records) -> list[Event]:
        base = rec.first - 1
        if rec.epoch < self.epoch:
            return self._close(
                f"stale leader: records of epoch {rec.epoch} < {self.epoch}", fenced=True
            )
        if rec.epoch > self.epoch:
            # a new leader's log agrees with ours up to `base`: cut back what lies beyond
            if not self.tail.exact or base > self.position or not self._cut_back(base):
                return self._need_sync()
            self.epoch = rec.epoch
            self.position = base
            self.replica.save(ShardState(self.shard, self.epoch, self.position))
        elif base > self.position:
            return self._need_sync()  # a gap
        skip = self.position - base
        for op in rec.ops[skip:]:
            self.replica.apply(op)
            self.position += 1
            tail = self.tail
            if op.kind is OpKind.APPEND:
                tail.entries.append((self.position, op.path, op.offset))
                if len(tail.entries) > _UNDO_LIMIT:
                    del tail.entries[: _UNDO_LIMIT // 2]
                    tail.floor = tail.entries[0][0] - 1
            else:
                # a delete or a replace cannot be undone: the undo list starts after it
                tail.entries.clear()
                tail.floor = self.position
        self.leader_position = max(self.leader_position, self.position)
        self._ack()
        return [Progress(self.epoch, self.position)]

    def _cut_back(self, base: int) -> bool:
        if base >= self.position:
            return True
        tail = self.tail
        if base < tail.floor:
            return False
        while tail.entries and tail.entries[-1][0] > base:
            _, path, offset = tail.entries.pop()
            if offset == 0:
                self.replica.remove(path)
            else:
                self.replica.truncate(path, offset)
        self.position = base
        return True

    def _need_sync(self) -> list[Event]:
        self._out += encode(NeedSync())
        self._awaiting_index = True  # the leader answers with an Index
        return []

    def _ack(self) -> None:
        self._out += encode(Ack(self.epoch, self.position, min(self.durable, self.position)))

    def synced(self, epoch: int, position: int) -> None:
        """The server fsynced everything applied up to `position` of `epoch`."""
        if epoch == self.epoch and position > self.durable and self.state is not State.CLOSED:
            self.durable = position
            self._ack()

    # -- bulk sync --------------------------------------------------------------------------

    def _begin_sync(self, index: Index) -> list[Event]:
        if index.epoch < self.epoch:
            return self._close(
                f"stale leader: index of epoch {index.epoch} < {self.epoch}", fenced=True
            )
        self._awaiting_index = False
        self._index = list(index.entries)
        self._index_at = index.position
        self._index_epoch = index.epoch
        self.state = State.SYNCING
        self.syncing = True
        self.replica.save(ShardState(self.shard, index.epoch, 0, syncing=True))
        self.epoch, self.position, self.durable = index.epoch, 0, 0
        mine = {e.path: (e.size, e.crc) for e in self.replica.index()}
        want = tuple(e.path for e in self._index if mine.get(e.path) != (e.size, e.crc))
        for path in want:
            self.replica.truncate(path, 0)
        self._out += encode(Want(want))
        return [SyncStarted(len(want))]

    def _end_sync(self) -> list[Event]:
        self.replica.finish_sync(self._index)
        self.epoch, self.position = self._index_epoch, self._index_at
        self.replica.save(ShardState(self.shard, self.epoch, self.position))
        self.tail.entries.clear()
        self.tail.floor = self.position
        self.tail.exact = True
        self.state = State.STREAMING
        self.syncing = False
        self.leader_position = max(self.leader_position, self.position)
        self._ack()
        return [SyncDone(self.epoch, self.position)]

    # -- output -----------------------------------------------------------------------------

    def held(self) -> ShardState:
        """What the copy holds now (the server saves it now and then)."""
        return ShardState(self.shard, self.epoch, self.position, self.syncing)

    @property
    def closed(self) -> bool:
        """The session ended (send what is left, then close the connection)."""
        return self.state is State.CLOSED

    def data_to_send(self) -> bytes:
        """Bytes to write to the leader's socket."""
        out = bytes(self._out)
        self._out.clear()
        return out


def new_nonce() -> bytes:
    """16 random bytes for a hello (for servers and tests)."""
    return os.urandom(16)
