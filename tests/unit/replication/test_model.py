"""The leader and follower sessions against a model: random appends, deliveries, acks,
disconnects, follower crashes and epoch changes (with and without a lost leader tail).

The leader's files are a dict; every operation goes through a real `ShardLog` (small backlog,
so followers fall behind it and bulk-sync); the follower applies to a dict through the
`ReplicaPort`. Invariant: whenever the follower holds a position of the leader's epoch outside
a bulk sync, its files are exactly the leader's files as they were at that position (its log
is a prefix of the leader's). At the end, with every byte delivered, the copy equals the
leader's files.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ringmq.replication.follower import FollowerSession, UndoTail
from ringmq.replication.leader import LeaderSession, NeedIndex, SendFiles
from ringmq.storage.replica import ShardState
from ringmq.storage.shardlog import FileEntry, FileOp, OpKind, ShardLog

ROOT = Path("/model")
SECRET = b"s3cret"
FILES = ("journal/1.seg", "journal/2.seg", "msgstore/1.msg", "dedup/log")

Files = dict[str, bytes]


def _entries(files: Files) -> list[FileEntry]:
    return [FileEntry(p, len(b), zlib.crc32(b)) for p, b in sorted(files.items())]


class DictReplica:
    """The follower's copy in memory (the `ReplicaPort` of storage/replica.py)."""

    def __init__(self) -> None:
        self.files: dict[str, bytearray] = {}
        self.saved = ShardState("s0", 0, 0)

    def apply(self, op: FileOp) -> None:
        if op.kind is OpKind.APPEND:
            self.write_chunk(op.path, op.offset, op.data)
        elif op.kind is OpKind.DELETE:
            self.remove(op.path)
        else:
            self.files[op.path] = bytearray(op.data)

    def write_chunk(self, name: str, offset: int, data: bytes) -> None:
        f = self.files.setdefault(name, bytearray())
        if len(f) < offset:
            f += bytes(offset - len(f))
        f[offset : offset + len(data)] = data

    def truncate(self, name: str, size: int) -> None:
        f = self.files.setdefault(name, bytearray())
        del f[size:]
        if len(f) < size:
            f += bytes(size - len(f))

    def remove(self, name: str) -> None:
        self.files.pop(name, None)

    def index(self) -> list[FileEntry]:
        return _entries({k: bytes(v) for k, v in self.files.items()})

    def finish_sync(self, entries: list[FileEntry]) -> None:
        keep = {e.path: e.size for e in entries}
        for name in list(self.files):
            if name not in keep:
                del self.files[name]
        for name, size in keep.items():
            self.truncate(name, size)

    def save(self, state: ShardState) -> None:
        self.saved = state

    def snapshot(self) -> Files:
        return {k: bytes(v) for k, v in self.files.items()}


class ReplicationMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.files: Files = {}
        self.epoch = 1
        self.log = ShardLog(ROOT, "s0", self.epoch, 0, backlog_bytes=400)
        self.ends: dict[int, int] = {}
        # (epoch, position) -> the leader's files then
        self.history: dict[tuple[int, int], Files] = {(1, 0): {}}
        self.replica = DictReplica()
        self.tail: UndoTail | None = None
        self.nonce = 0
        self.ahead = (0, 0)  # files hold this much beyond the position a restart came back to
        self._connect(ShardState("s0", 0, 0))

    # -- plumbing ---------------------------------------------------------------------------

    def _connect(self, held: ShardState) -> None:
        self.nonce += 1
        self.leader = LeaderSession(self.log, SECRET, self.ends)
        self.follower = FollowerSession(
            self.replica, held, "f1", SECRET, self.nonce.to_bytes(16, "big"), self.tail
        )
        self.tail = self.follower.tail
        self.to_leader = bytearray(self.follower.data_to_send())
        self.to_follower = bytearray()

    def _leader_events(self, events: list[object]) -> None:
        for ev in events:
            if isinstance(ev, NeedIndex):
                self.leader.index(self.log.position, _entries(self.files))
                self.index_files = dict(self.files)
            elif isinstance(ev, SendFiles):
                for e in ev.files:
                    data = self.index_files[e.path][: e.size]
                    for at in range(0, max(len(data), 1), 7):
                        self.leader.chunk(e.path, at, data[at : at + 7])
                self._leader_events(list(self.leader.files_done()))
        self.to_follower += self.leader.data_to_send()

    def _record(self, op: FileOp) -> None:
        if op.kind is OpKind.APPEND:
            self.log.append(ROOT / op.path, op.offset, op.data)
        elif op.kind is OpKind.DELETE:
            self.log.delete(ROOT / op.path)
        else:
            self.log.replace(ROOT / op.path, op.data)
        self.history[(self.epoch, self.log.position)] = dict(self.files)
        self._leader_events(list(self.leader.pump()))

    # -- the leader writes ------------------------------------------------------------------

    # appends dominate, as in a store: deletes and replaces cut the follower's undo list
    @rule(
        kind=st.sampled_from([OpKind.APPEND] * 6 + [OpKind.DELETE, OpKind.REPLACE]),
        name=st.sampled_from(FILES),
        data=st.binary(min_size=1, max_size=20),
    )
    def write(self, kind: OpKind, name: str, data: bytes) -> None:
        if kind is OpKind.APPEND:
            old = self.files.get(name, b"")
            self.files[name] = old + data
            self._record(FileOp(OpKind.APPEND, name, len(old), data))
        elif kind is OpKind.DELETE:
            if name in self.files:
                del self.files[name]
                self._record(FileOp(OpKind.DELETE, name))
        else:
            self.files["dedup/log"] = data
            self._record(FileOp(OpKind.REPLACE, "dedup/log", 0, data))

    # -- the network ------------------------------------------------------------------------

    @rule(n=st.integers(1, 200))
    def deliver_to_follower(self, n: int) -> None:
        data, self.to_follower = bytes(self.to_follower[:n]), self.to_follower[n:]
        self.follower.receive_data(data)
        self.to_leader += self.follower.data_to_send()

    @rule(n=st.integers(1, 200))
    def deliver_to_leader(self, n: int) -> None:
        data, self.to_leader = bytes(self.to_leader[:n]), self.to_leader[n:]
        self._leader_events(list(self.leader.receive_data(data)))

    @rule()
    def catch_up(self) -> None:
        self._drain()

    def _drain(self) -> None:
        for _ in range(1000):
            if not self.to_follower and not self.to_leader:
                break
            self.deliver_to_follower(1 << 20)
            self.deliver_to_leader(1 << 20)

    @rule()
    def disconnect(self) -> None:
        self._connect(self.follower.held())

    @rule()
    def follower_restarts(self) -> None:
        # the process dies: only what it saved survives (files keep every write applied)
        f = self.follower
        if not f.syncing:
            # the files keep what was applied beyond the saved position (operations are
            # idempotent: the follower applies them again from there)
            self.ahead = max(self.ahead, (f.epoch, f.position))
        self.tail = None
        self._connect(self.replica.saved)

    @rule(lose=st.integers(0, 6), known=st.booleans())
    def new_epoch(self, lose: int, known: bool) -> None:
        # the leader restarts (or another takes over) with a new epoch; its last `lose`
        # records never reached its disk (the follower may hold them: a divergent tail)
        start = max(self.log.start, self.log.position - lose)
        self.files = dict(self.history[(self.epoch, start)])
        if known:
            self.ends[self.epoch] = start
        self.epoch += 1
        self.history[(self.epoch, start)] = dict(self.files)
        self.log = ShardLog(ROOT, "s0", self.epoch, start, backlog_bytes=400)
        self._connect(self.follower.held())

    # -- what must hold ---------------------------------------------------------------------

    @invariant()
    def follower_is_a_prefix_of_the_leader(self) -> None:
        f = self.follower
        assert f.epoch <= self.epoch
        if f.syncing or f.epoch != self.epoch or f._awaiting_index:
            return
        assert f.position <= self.log.position
        if self.ahead[0] == f.epoch and f.position < self.ahead[1]:
            return
        assert self.replica.snapshot() == self.history[(f.epoch, f.position)]

    @invariant()
    def acks_never_run_ahead(self) -> None:
        assert self.leader.acked <= self.log.position
        if self.leader.acked:
            assert self.history[(self.epoch, self.leader.acked)] is not None

    def teardown(self) -> None:
        # everything delivered: the copy catches up with the leader exactly
        self._drain()
        f = self.follower
        if f.closed or self.leader.closed:
            return
        assert (f.epoch, f.position) == (self.epoch, self.log.position)
        assert self.replica.snapshot() == self.files
        assert self.leader.acked == self.log.position


TestReplication = ReplicationMachine.TestCase
