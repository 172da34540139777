"""The leader's replication listener: followers connect to the cluster port and get the log.

Theory of operation
-------------------
`ReplicationLeader.start` gives the broker's `FileStore` a `ShardLog` (storage/shardlog.py)
of a new epoch (etcd's, `ReplicationSettings.epoch`, on a cluster member; in the static mode
one above the epoch in the store's `SHARD`), records it in `SHARD` and listens on the cluster
port.
Each follower connection runs a `replication.leader.LeaderSession` (sans-IO) in two tasks on
the broker's loop: one reads the follower's frames (and performs a bulk sync when the session
asks: the file index and the file chunks are read in the default executor, so the loop keeps
serving clients meanwhile), the other sends records when the socket fell behind. Records
are sent as the log grows, from inside the store's write (the log's `on_append`), to every
streaming follower whose socket buffer holds less than `_DIRECT_BUFFER_BYTES`; past that the
session's send loop is woken, waits for the socket (`drain`) and sends the rest, so a slow
follower holds only its own buffer. One that falls behind the log's backlog is bulk synced
again.

`acked` maps each connected follower that has acknowledged (so: finished its bulk sync) to
the last position of this epoch it acknowledged. With `--confirm-replicated` the group commit
asks `covers(position)` before it releases confirms, and `on_progress` (its `replicated`) runs
whenever an acknowledgement moves or a follower leaves (server/commit.py). A follower still in
its bulk sync does not count yet, and one that disconnects stops counting at once; a cluster
member gates confirms on the ISR instead, reading `acked` (server/member.py).

Only this module and `replication_follower.py` open replication sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from ringmq.replication.codec import CHUNK_BYTES
from ringmq.replication.leader import (
    Acked,
    Authenticated,
    Closed,
    Event,
    FrameCache,
    LeaderSession,
    NeedIndex,
    SendFiles,
    State,
)
from ringmq.server.options import ReplicationSettings
from ringmq.storage.replica import ShardState, read_state, write_state
from ringmq.storage.shardlog import FileEntry, ShardLog, file_index
from ringmq.storage.store import FileStore

log = logging.getLogger(__name__)

_DIRECT_BUFFER_BYTES = 1 << 20
"""`_wake` writes to a follower's socket directly while less than this waits in its buffer;
past it the send loop takes over (and waits for the socket)."""


class ReplicationLeader:
    """The cluster-port listener of a leader (see the module docstring)."""

    def __init__(self, store: FileStore, settings: ReplicationSettings, host: str) -> None:
        self.store = store
        self.settings = settings
        self.host = host
        self.port = 0
        self.log: ShardLog | None = None
        self._frames = FrameCache()  # the sessions' encoded records, shared (one per log)
        self.acked: dict[str, int] = {}
        """Follower name -> last position of this epoch it acknowledged."""
        self._server: asyncio.Server | None = None
        self._streams: dict[LeaderSession, tuple[asyncio.StreamWriter, asyncio.Event]] = {}
        """The authenticated sessions, with their socket and their send loop's wake-up."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        """Every session's socket: `stop()` closes them (the listener's close does not)."""
        self.on_progress: Callable[[], None] | None = None
        """Called when an acknowledgement moved or a follower left (the group commit)."""

    async def start(self) -> None:
        """Start the epoch's log and listen on the cluster port."""
        root = self.store.directory
        held = read_state(root)
        if held is not None and held.shard != self.settings.shard:
            raise ValueError(f"{root} holds shard {held.shard!r}, not {self.settings.shard!r}")
        epoch = self.settings.epoch
        if epoch is None:
            epoch = (held.epoch if held is not None else 0) + 1
        elif held is not None and held.epoch >= epoch:
            # followers refuse an epoch at or below the one they hold: etcd's count must lead
            raise ValueError(f"{root} holds epoch {held.epoch}, not below etcd's {epoch}")
        start = held.position if held is not None else 0
        write_state(root, ShardState(self.settings.shard, epoch, start))
        shard_log = ShardLog(root, self.settings.shard, epoch, start)
        shard_log.on_append = self._wake
        self.store.attach_log(shard_log)
        self.log = shard_log
        self._frames = FrameCache()
        self._server = await asyncio.start_server(
            self._serve, self.host, self.settings.port, limit=CHUNK_BYTES
        )
        self.port = self._server.sockets[0].getsockname()[1]
        log.info(
            "replication listening on %s:%d (shard %s, epoch %d)",
            self.host,
            self.port,
            shard_log.shard,
            epoch,
        )

    def sent_to(self, node: str) -> int | None:
        """The last position sent to the follower `node` (None: not connected)."""
        for session in self._streams:
            if session.node == node:
                return session.sent
        return None

    def replicated(self) -> int:
        """The lowest position every counted follower acknowledged (0 without one)."""
        return min(self.acked.values(), default=0)

    def covers(self, log_position: int) -> bool:
        """Every counted follower acknowledged `log_position` (true with none)."""
        return all(acked >= log_position for acked in self.acked.values())

    def _progress(self) -> None:
        if self.on_progress is not None:
            self.on_progress()

    def _wake(self) -> None:
        # The log grew (the store handed writes to the OS): send them now, from inside the
        # write, to every follower whose socket is keeping up. Waiting for the send loop's
        # turn on a busy loop would add that turn to every confirm the followers gate.
        for session, (writer, wake) in self._streams.items():
            if wake.is_set() or session.state is not State.STREAMING:
                continue  # the send loop has it (waiting for the socket, or a bulk sync)
            transport = writer.transport
            if transport.is_closing() or transport.get_write_buffer_size() > _DIRECT_BUFFER_BYTES:
                wake.set()
                continue
            try:
                _push(session, writer)
            except Exception:  # never into the store's write: the send loop meets it again
                log.exception("replication: sending to %s failed", session.node)
            if session.sent < session.log.position or session.backlogged:
                wake.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self.log is not None
        session = LeaderSession(self.log, self.settings.secret, frames=self._frames)
        wake = asyncio.Event()
        peer = writer.get_extra_info("peername")
        sender = asyncio.create_task(self._send_loop(session, writer, wake))
        self._tasks.add(sender)
        self._writers.add(writer)
        try:
            while not session.closed:
                data = await reader.read(CHUNK_BYTES)
                if not data:
                    break
                await self._handle(session, session.receive_data(data), writer, wake)
                if session.node:
                    self._streams[session] = (writer, wake)
                data = session.data_to_send()
                if data:  # (an acknowledgement, the usual read, has no answer)
                    writer.write(data)
                    await writer.drain()
        except (ConnectionError, OSError) as exc:
            log.info("replication: follower %s (%s) lost: %s", session.node or "?", peer, exc)
        finally:
            self._streams.pop(session, None)
            if self.acked.pop(session.node, None) is not None:
                self._progress()
            sender.cancel()
            with contextlib.suppress(BaseException):
                await sender
            self._tasks.discard(sender)
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.write(session.data_to_send())
                writer.close()

    async def _handle(
        self,
        session: LeaderSession,
        events: list[Event],
        writer: asyncio.StreamWriter,
        wake: asyncio.Event,
    ) -> None:
        loop = asyncio.get_running_loop()
        for ev in events:
            match ev:
                case Authenticated():
                    log.info("replication: follower %s connected", ev.node)
                    wake.set()
                case Acked():
                    if session.node not in self.acked:
                        log.info(
                            "replication: follower %s in step at position %d",
                            session.node,
                            ev.written,
                        )
                    self.acked[session.node] = ev.written
                    self._progress()
                case NeedIndex():
                    assert self.log is not None
                    # every record up to `position` has reached the files: a copy read from
                    # now on holds at least that much (the records after it are idempotent)
                    self.store.write_out()
                    position = self.log.position
                    # files whose copy on disk lags the log get their content again, after
                    # `position` (stream tracking files waiting for their rename)
                    self.store.relog_pending()
                    entries = await loop.run_in_executor(None, file_index, self.store.directory)
                    log.info(
                        "replication: bulk sync of %s from position %d (%d files)",
                        session.node,
                        position,
                        len(entries),
                    )
                    session.index(position, entries)
                case SendFiles():
                    for entry in ev.files:
                        await self._send_file(session, entry, writer)
                    await self._handle(session, session.files_done(), writer, wake)
                    wake.set()
                case Closed():
                    log.warning("replication: session with %s closed: %s", session.node, ev.reason)

    async def _send_file(
        self, session: LeaderSession, entry: FileEntry, writer: asyncio.StreamWriter
    ) -> None:
        loop = asyncio.get_running_loop()
        path = self.store.directory / entry.path
        offset = 0
        while offset < entry.size:
            n = min(CHUNK_BYTES, entry.size - offset)
            data = await loop.run_in_executor(None, _read_at, path, offset, n)
            if not data:
                break  # deleted or replaced since the index: its record follows in the log
            session.chunk(entry.path, offset, data)
            offset += len(data)
            writer.write(session.data_to_send())
            await writer.drain()

    async def _send_loop(
        self, session: LeaderSession, writer: asyncio.StreamWriter, wake: asyncio.Event
    ) -> None:
        while True:
            await wake.wait()
            await writer.drain()  # what `_wake` wrote directly leaves first
            wake.clear()
            while _push(session, writer):
                await writer.drain()

    async def stop(self) -> None:
        """Stop listening, end every session and record the position reached in `SHARD`."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        # End every session too: a follower left connected to this epoch's session would wait
        # on it for good (asyncio's Server.close keeps accepted connections open before 3.12),
        # never reconnecting to the node's next epoch, often at the same address.
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), timeout=2)
        if self.log is not None:
            write_state(
                self.store.directory,
                ShardState(self.log.shard, self.log.epoch, self.log.position),
            )


def _push(session: LeaderSession, writer: asyncio.StreamWriter) -> bool:
    """Write what the log holds for `session` (up to its bound) to its socket; False when
    there was nothing."""
    session.pump()
    data = session.data_to_send()
    if data:
        writer.write(data)
    return bool(data)


def _read_at(path: Path, offset: int, n: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(n)
    except FileNotFoundError:
        return b""
