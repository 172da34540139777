"""The follower's replication client: keep a warm copy of the leader's store directory.

Theory of operation
-------------------
`ReplicationFollower.run` connects to the leader's cluster port and runs a
`replication.follower.FollowerSession` (sans-IO) over it, applying what arrives to a
`storage.replica.Replica` on `<data-dir>/store`: the follower's data directory stays a valid
ringmq data directory, so `ringmq serve` started on it (a promotion) recovers every record
the follower applied, from its own files. The follower serves no clients meanwhile.

Acknowledgements: the session acknowledges each batch once written. With
`follower_fsync` the client also fsyncs what was written (in the default executor, one fsync
in flight at a time) and reports it (`synced`), so the leader learns a durable position.
The copy's `SHARD` (epoch, position) is saved after a bulk sync, at an epoch change (by the
session) and at the end, on the loop; and at most once a second while streaming, off the
loop (`Replica.begin_save` / `persist`, one at a time in the default executor): that save
fsyncs a second's writes, and the loop keeps applying and acknowledging meanwhile (a loop
blocked in it held back every acknowledgement, and with them the leader's confirms). `run`
returns only once such a save is done: the directory is then the caller's.

A lost connection is retried every `retry_s`; a refusal (bad secret, other shard, a stale
leader) is logged as an ERROR and retried too (the operator may fix the leader meanwhile).
The undo list of the session (`UndoTail`) is kept across reconnections, so a new leader's
divergent tail can be cut back without a bulk sync.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from pathlib import Path
from typing import Final

from ringmq.replication.codec import CHUNK_BYTES
from ringmq.replication.follower import (
    Closed,
    FollowerSession,
    Progress,
    SyncDone,
    SyncStarted,
    UndoTail,
    new_nonce,
)
from ringmq.server.datadir import DataDirLock
from ringmq.server.options import ReplicationSettings, ServerOptions
from ringmq.storage.journal import fsync_fds
from ringmq.storage.replica import Replica, ShardState

log = logging.getLogger(__name__)

_SAVE_EVERY_S: Final = 1.0


class ReplicationFollower:
    """Follow one leader into `store_dir` (see the module docstring)."""

    def __init__(
        self,
        store_dir: Path,
        settings: ReplicationSettings,
        node: str,
        *,
        retry_s: float = 0.5,
        save_every_s: float = _SAVE_EVERY_S,
    ) -> None:
        assert settings.follow is not None
        self.settings = settings
        self.node = node
        self.retry_s = retry_s
        self.save_every_s = save_every_s
        self.replica = Replica(store_dir)
        self.session: FollowerSession | None = None
        self._tail: UndoTail | None = None
        self._stopping = asyncio.Event()
        self._saved_at = 0.0
        self._fsync: asyncio.Future[None] | None = None
        self._saving: asyncio.Future[None] | None = None
        self._following: asyncio.Task[None] | None = None  # the connection `stop` ends

    def held(self) -> ShardState:
        """What the copy holds now."""
        if self.session is not None:
            return self.session.held()
        return self.replica.state or ShardState(self.settings.shard, 0, 0)

    async def run(self) -> None:
        """Follow until `stop()`; saves the copy's state on the way out."""
        host, port = self.settings.follow or ("", 0)
        try:
            while not self._stopping.is_set():
                self._following = asyncio.create_task(self._follow_once(host, port))
                try:
                    await self._following
                except asyncio.CancelledError:
                    if not self._stopping.is_set():
                        raise  # `run` itself was cancelled
                except (ConnectionError, OSError) as exc:
                    log.info("replication: leader %s:%d unreachable: %s", host, port, exc)
                finally:
                    self._following = None
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self.retry_s)
        finally:
            # a save running off the loop ends first: once `run` returns the directory is the
            # caller's (a promotion opens it as a store and writes `SHARD` itself)
            if self._saving is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._saving)
            self._save()
            self.replica.close()

    def stop(self) -> None:
        """Ask `run` to return."""
        self._stopping.set()
        if self._following is not None:
            self._following.cancel()  # its `finally` saves and closes

    async def _follow_once(self, host: str, port: int) -> None:
        reader, writer = await asyncio.open_connection(host, port, limit=CHUNK_BYTES)
        session = FollowerSession(
            self.replica, self.held(), self.node, self.settings.secret, new_nonce(), self._tail
        )
        self._tail = session.tail
        self.session = session
        try:
            writer.write(session.data_to_send())
            log.info("replication: following %s:%d (shard %s)", host, port, session.shard)
            while not session.closed:
                data = await reader.read(CHUNK_BYTES)  # `stop` cancels this task
                if not data:
                    log.info("replication: leader %s:%d closed the connection", host, port)
                    break
                for ev in session.receive_data(data):
                    self._event(ev)
                writer.write(session.data_to_send())
                self._maybe_fsync(session, writer)
                self._maybe_save()
                await writer.drain()
        finally:
            self._save()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _event(self, ev: object) -> None:
        match ev:
            case SyncStarted():
                log.info("replication: bulk sync started (%d files to copy)", ev.files)
            case SyncDone():
                log.info(
                    "replication: bulk sync done at epoch %d position %d", ev.epoch, ev.position
                )
            case Closed():
                if ev.fenced:
                    log.error("replication: %s", ev.reason)
                else:
                    log.warning("replication: %s", ev.reason)
            case Progress():
                pass

    def _maybe_fsync(self, session: FollowerSession, writer: asyncio.StreamWriter) -> None:
        # follower_fsync: one fsync in flight; what arrives meanwhile waits for the next
        if not self.settings.follower_fsync or self._fsync is not None:
            return
        if session.durable >= session.position or session.syncing:
            return
        epoch, position = session.epoch, session.position
        fds = self.replica.flush()
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(None, fsync_fds, fds)
        self._fsync = fut

        def done(f: asyncio.Future[None]) -> None:
            self._fsync = None
            if f.cancelled() or f.exception() is not None:
                log.error("replication: fsync failed: %s", f.exception())
                return
            session.synced(epoch, position)
            if not writer.is_closing():
                writer.write(session.data_to_send())
                self._maybe_fsync(session, writer)

        fut.add_done_callback(done)

    def _maybe_save(self) -> None:
        now = time.monotonic()
        if now - self._saved_at < self.save_every_s or self._saving is not None:
            return
        self._saved_at = now
        held = self._unsaved()
        if held is None:
            return
        replica = self.replica
        pending = replica.begin_save(held)
        fut = asyncio.get_running_loop().run_in_executor(None, replica.persist, pending)
        self._saving = fut

        def done(f: asyncio.Future[None]) -> None:
            self._saving = None
            if f.cancelled() or f.exception() is not None:
                log.error("replication: saving the copy's state failed: %s", f.exception())
                return
            replica.saved(pending)

        fut.add_done_callback(done)

    def _save(self) -> None:
        held = self._unsaved()
        if held is not None:
            self.replica.save(held)

    def _unsaved(self) -> ShardState | None:
        # what the copy holds, when `SHARD` does not say it yet and it may be said (not in
        # the middle of a bulk sync)
        held = self.held()
        return held if held != self.replica.state and not held.syncing else None


def run_follower(options: ServerOptions) -> int:
    """`ringmq serve --follow HOST:PORT`: follow until SIGTERM/SIGINT; the exit status."""
    settings = options.replication
    assert settings is not None
    assert settings.follow is not None
    lock = DataDirLock.acquire(options.data_dir)

    async def main() -> None:
        follower = ReplicationFollower(options.data_dir / "store", settings, options.node)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, follower.stop)
        await follower.run()

    try:
        asyncio.run(main())
    finally:
        lock.release()
    log.info("stopped")
    return 0
