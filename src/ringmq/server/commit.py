"""Group commit: fsync the store off the loop, then release the confirms it covers.

Theory of operation
-------------------
The broker writes persistent messages, acks and definitions to the store as it handles
commands; nothing is durable until an fsync covers it. After every read batch the server calls
`after_batch()` on the loop thread:

1. the confirms the broker held back (`Broker.drain_unconfirmed()`) join `waiting`;
2. if there are waiting confirms (or persistent messages that the durability hold keeps from
   consumers until they are durable: `Broker.holding()`, core/queue/hold.py) and fewer than
   `MAX_FSYNCS` fsyncs are running, `store.flush()` hands every buffered write to the OS (on
   the loop thread: the store's owner) and the point's fsync runs in an executor, so the loop
   keeps reading and writing meanwhile; `flush()` is called only there, because its point
   holds descriptors that only the fsync closes (every other hand-over uses
   `store.write_out()`, which takes none);
3. when a group's fsync and those of every earlier group are done, `Broker.stored(position)`
   hands the messages it covered to their consumers and every confirm of that group is
   released through `Broker.confirm_stored` (the session coalesces contiguous tags into
   `multiple=true`); the confirms that waited for a free slot form the next group, started
   at once.

Several fsyncs in flight (up to `MAX_FSYNCS`), each a group: a batch that arrives while an
fsync runs starts its own instead of waiting for that one to end (which covers none of its
writes) and then for a second one. With one fsync at a time a pipelining publisher (the stream
protocol's: 10 frames unconfirmed) fell into lockstep: the frames read during an fsync waited
for it, then for their own, and the publisher sent nothing meanwhile. The groups are still
released strictly in order: each point's fsync is `store.sync_files` (concurrent: each point
owns its descriptors), then, on the same executor thread once the previous group's job is
done, `store.synced` (tracking renames, the durable position) in point order; `_done` releases
the oldest groups that are done. So a confirm goes only after the fsync of the point that
covers its write and every earlier one. A burst of N publishes still costs about one fsync per
group rather than N (RabbitMQ's and Artemis' group commit), at most `MAX_FSYNCS` at a time.
Writes without a waiting confirm (acks, deliveries) are handed to the OS at the end of the
batch and made durable by the next group or by `tick()` (called from the server's periodic
sweep), at most a sweep period later.

Stream confirms under the `written` rule (`[server] stream_confirm`, core/streamspec.py
`ConfirmRule`; the default `fsynced` takes the path above): the broker holds them apart
(`Broker.drain_unwritten()`); at the end of the batch the store's writes are handed to the OS
(`store.write_out()`, or the `flush()` of an fsync starting now) and then, on the next loop
turn, they are released (`_written`, the one place that rule is met) without waiting for any
fsync: a kill -9 of the broker loses none of them, a power loss may. A failed write nacks them
as it nacks a group. Such writes are made durable by the next group or by `tick()`.

Callers that answer only once their writes are durable (the streams API's reserve and settle,
which have no confirm to hold) call `until_durable()`: a future resolved when the first group
that covers the store's position at the call is released (its fsync done and, with a replica
gate, its shard-log position acknowledged: the same release as the confirms'; one is started
at once when no group in flight covers that position and a slot is free), or failed with the
OSError when that flush or fsync fails.

Write failures (ENOSPC, EDQUOT, EIO...; docs/storage.md, "Write failures"): when `flush()` or
the fsync raises, the group's confirms (and those of every later group in flight, after a
failed fsync) are never acked: `Broker.unstored(position)` takes every
message written after what an fsync covered out of its queues, unseen (the hold kept it from
consumers), and `Broker.fail_unconfirmed` nacks the confirms (the publisher may retry); one
ERROR line names the path, the errno and what happens next, and the `disk_write` resource
alarm blocks publishers (connection.blocked) while consumers go on. Until a write succeeds
again the core refuses persistent publishes to durable queues before they are enqueued, and
new held confirms are nacked at once without another write; `tick()`
probes by flushing again (the store rewrites the failed records at the same offsets) and, once
a flush and its fsync succeed, clears the alarm. A failed *fsync* fences the store: the alarm
stays until restart.

Waiting for followers (`--confirm-replicated`, off by default; `replica_gate`): when the
store's writes are replicated (server/replication_leader.py), a group whose fsync completed is
released only once every connected follower acknowledged the shard-log position its writes
reached (`SyncPoint.log_position`); until then it is *parked*, and later groups park behind
it so that confirms and the durability hold stay in order. The replication listener calls
`replicated()` when acknowledgements move or a follower leaves. Which followers count is the
gate's: in the static mode every connected follower (none connected means no wait); in a
cluster on etcd the ISR (`ringmq.server.member`, `replication.isr`), whose gate also refuses
everything once the node stops leading (the election's fence). With a gate, stream readers
see committed chunks only (`StreamFiles.hide`): each release shows them what its shard-log
position covers, and chunks not shown yet count as held (a group starts for them).

Only the loop thread calls these methods; the executor threads only run `_sync` (the store's
`sync_files` and `synced`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from ringmq.core.effects import Effect
from ringmq.storage.store import SyncPoint

if TYPE_CHECKING:
    from ringmq.core.broker import Broker
    from ringmq.storage.store import FileStore

log = logging.getLogger(__name__)

MAX_FSYNCS: Final = 4
"""Group fsyncs in flight at once (module docstring); more batches than that wait and join."""

_Group = list[tuple[int, int, int]]


@dataclass(slots=True, eq=False)
class _Flight:
    """One group's fsync in flight: its confirms, its start number and shard-log position."""

    group: _Group
    started: int
    position: int
    log_position: int
    finished: threading.Event
    """Set by its job once its `synced` step ran or failed (the next job waits for it)."""
    fut: Future[int] | None = None
    done: bool = False
    dead: bool = False
    """Its confirms were nacked (it or an earlier group's fsync failed): never released."""


class ReplicaGate(Protocol):
    """What the group commit asks of replication before it releases a group."""

    def covers(self, log_position: int) -> bool:
        """True when every follower that counts acknowledged `log_position`."""
        ...


class GroupCommit:
    """Group-commit fsync for one broker and its store (see the module docstring).

    Args:
        broker: the core `Broker` (`drain_unconfirmed`, `confirm_stored`, `fail_unconfirmed`,
            `set_alarm`).
        store: its file store (`flush`, `fsync`, `fenced`, `directory`).
        loop: the broker's event loop.
        release: runs a function producing effects as one server batch (applies and flushes).
    """

    def __init__(
        self,
        broker: Broker,
        store: FileStore,
        loop: asyncio.AbstractEventLoop,
        release: Callable[[Callable[[], list[Effect]]], None],
    ) -> None:
        self.broker = broker
        self.store = store
        self.loop = loop
        self.release = release
        self.waiting: _Group = []
        self._flights: deque[_Flight] = deque()  # oldest first
        self._flushed = store.position
        self._syncing_to = 0  # the position the newest fsync in flight covers
        # one thread per fsync in flight: a job waits for the previous one's `synced`, which
        # is already running (the executor's queue is FIFO and never longer than its threads)
        self._executor = ThreadPoolExecutor(
            max_workers=MAX_FSYNCS, thread_name_prefix="ringmq-fsync"
        )
        self._closed = False
        self.syncs = 0
        """fsyncs completed (for tests and metrics)."""
        self.failure: str | None = None
        """Why the last write or fsync failed, while the `disk_write` alarm is on."""
        self.failed_groups = 0
        """Groups whose confirms were nacked because the store could not write them."""
        self._durable_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._starts = 0  # fsyncs started so far (each group's number)
        self._failed_at = 0  # `_starts` at the last failure: only a later fsync clears it
        self.replica_gate: ReplicaGate | None = None
        """Set: groups also wait for the followers' acknowledgements (module docstring)."""
        # fsynced groups waiting for the followers: (log position, durable, healthy, group)
        self._parked: list[tuple[int, int, bool, _Group]] = []
        self.released_log_position = 0
        """The shard-log position of the last group released (every confirm so far is below)."""
        self._released = store.durable_position
        """The store position the last group released covered (`until_durable` waits for it)."""

    @property
    def in_flight(self) -> Future[int] | None:
        """The newest group fsync in flight (None: none runs)."""
        return self._flights[-1].fut if self._flights else None

    @property
    def waiting_log_position(self) -> int | None:
        """The shard-log position the oldest parked group waits for (None: none parked)."""
        return self._parked[0][0] if self._parked else None

    def after_batch(self) -> None:
        """End of a batch: collect held confirms, start a group fsync or hand writes to the OS."""
        if self._closed:
            return
        held = self.broker.drain_unconfirmed()
        if held:
            self.waiting.extend(held)
        written = self.broker.drain_unwritten()
        if self.failure is not None:
            # writes are failing: nack at once; only `tick()` tries the disk again
            self.waiting.extend(written)
            if self.waiting and not self._flights:
                group, self.waiting = self.waiting, []
                self._unstored(self.store.durable_position)
                self.loop.call_soon(self._nack, group)
            return
        if len(self._flights) < MAX_FSYNCS and (self.waiting or self._holding()):
            if not self._start():
                if written:  # not written out either
                    self.loop.call_soon(self._nack, written)
                return
        elif self.store.position > self._flushed or written or self.store.streams.appended:
            # no fsync starts now: hand the writes over without taking descriptors, so the
            # fsync in flight overlaps the next writes and the next group's `flush()` has
            # little left to write (stream appends do not move the store's position: they
            # are noted apart, `StreamFiles.appended`)
            try:
                self._flushed = self.store.write_out()
            except OSError as exc:
                self._failed(exc, written, fsync=False)
                return
        if written:
            self.loop.call_soon(self._written, written)

    def _written(self, group: _Group) -> None:
        # The `written` rule's release point: these confirms' chunks are in the OS's hands
        # (page cache), which is all that rule asks locally; no fsync is waited for. The
        # followers' gate, if any, is still asked (`_settle`), as for a fsynced group.
        if self._closed:
            return
        shard_log = self.store.shard_log
        log_position = shard_log.position if shard_log is not None else 0
        self._settle(log_position, self.store.durable_position, self.failure is None, group)

    def until_durable(self) -> asyncio.Future[None]:
        """A future resolved once an fsync covers every write made so far (see module doc)."""
        fut: asyncio.Future[None] = self.loop.create_future()
        position = self.store.position
        if self._released >= position:
            fut.set_result(None)
            return fut
        if self.failure is not None:
            fut.set_exception(OSError(errno.EIO, self.failure))
            return fut
        self._durable_waiters.append((position, fut))
        if self._flights:
            if position > self._syncing_to and len(self._flights) < MAX_FSYNCS:
                self._start()  # (else a group in flight covers it, or `_done` starts one)
        elif self.store.durable_position < position or not self._parked:
            self._start()  # (fsynced already, parked: the parked group's release wakes it)
        return fut

    def _wake(self, durable: int, exc: OSError | None = None) -> None:
        # Resolve the waiters an fsync up to `durable` covers (all of them, failed, on `exc`).
        keep: list[tuple[int, asyncio.Future[None]]] = []
        for position, fut in self._durable_waiters:
            if fut.done():
                continue
            if exc is not None:
                fut.set_exception(exc)
            elif position <= durable:
                fut.set_result(None)
            else:
                keep.append((position, fut))
        self._durable_waiters = keep

    def tick(self) -> None:
        """Periodic: make writes that no confirm waited for durable too."""
        if self._closed or self._flights:
            return
        if self.failure is not None and self.store.fenced:
            return  # a failed fsync: nothing is written until restart
        if (
            self.failure is not None
            or self.store.durable_position < self.store.position
            or self.store.streams.unsynced()  # stream appends no fsync waited for
        ):
            self._start()  # while failing: the probe that may clear the alarm

    def _start(self) -> bool:
        # False: the flush failed (its group nacked)
        group, self.waiting = self.waiting, []
        try:
            point: SyncPoint = self.store.flush()
        except OSError as exc:
            self._failed(exc, group, fsync=False)
            return False
        self._flushed = self._syncing_to = point.position
        self._starts += 1
        before = self._flights[-1].finished if self._flights else None
        flight = _Flight(group, self._starts, point.position, point.log_position,
                         threading.Event())  # fmt: skip
        self._flights.append(flight)
        fut = self._executor.submit(self._sync, point, before, flight)
        flight.fut = fut
        fut.add_done_callback(lambda f: self._notify(flight))
        return True

    def _notify(self, flight: _Flight) -> None:
        # On the executor thread: `_done` on the loop's very next turn. (`run_in_executor`
        # takes two: its future is copied into an asyncio one, whose callbacks then wait for
        # a further turn, after the socket reads that became ready meanwhile.)
        try:
            self.loop.call_soon_threadsafe(self._done, flight)
        except RuntimeError:
            pass  # the loop is closed: nothing waits for this group any more

    def _sync(self, point: SyncPoint, before: threading.Event | None, flight: _Flight) -> int:
        # On an executor thread: this point's fsyncs (at once with the other groups'), then
        # its `synced` step after the previous group's (point order: the durable position and
        # the tracking renames never get ahead of an fsync still running).
        try:
            self.store.sync_files(point)
            if before is not None:
                before.wait()
            return self.store.synced(point)
        finally:
            flight.finished.set()

    def _holding(self) -> bool:
        # Stream chunks readers may not see yet need a release, unless a group in flight or
        # parked covers them (committed reads, streamdirs.py). Held messages need an fsync,
        # unless they are all in groups in flight or parked groups (already fsynced, waiting
        # for followers) and nothing was written since.
        streams = self.store.streams
        if streams.committed_reads:
            if self._flights:
                covered = self._flights[-1].log_position
            else:
                covered = self._parked[-1][0] if self._parked else self.released_log_position
            if streams.hidden_after(covered):
                return True
        if not self.broker.holding():
            return False
        if self._flights:
            return self.store.position > self._syncing_to
        return not self._parked or self.store.position > self._syncing_to

    def replicated(self) -> None:
        """Followers acknowledged more (or one left): release the parked groups now covered."""
        gate = self.replica_gate
        while self._parked and (gate is None or gate.covers(self._parked[0][0])):
            log_position, durable, healthy, group = self._parked.pop(0)
            self.released_log_position = max(self.released_log_position, log_position)
            self._release(durable, healthy, group)

    def _release(self, durable: int, healthy: bool, group: _Group) -> None:
        # the waiters, the persistent messages this group covered (hold.py) and the stream
        # chunks it covered (committed reads) go on now
        self._released = max(self._released, durable)
        streams = self.store.streams
        if streams.committed_reads:
            streams.show(self.released_log_position)
        self._wake(durable)
        self.release(lambda: self.broker.stored(durable, healthy=healthy) + self._confirm(group))

    def _done(self, flight: _Flight) -> None:
        flight.done = True
        if self._closed:
            return
        fut = flight.fut
        assert fut is not None
        exc = fut.exception() if not fut.cancelled() else None
        failed = fut.cancelled() or exc is not None
        if failed and not flight.dead:
            # The data may not be on disk: never confirm it; nack the group, and every later
            # group in flight (its fsync cannot stand for this one's writes).
            if not isinstance(exc, OSError):
                exc = OSError(f"fsync did not complete: {exc!r}")
            group: _Group = []
            after = self.store.durable_position
            for f in self._flights:
                if f.started < flight.started:
                    after = f.position if not f.dead else after
                elif not f.dead:
                    f.dead = True
                    group += f.group
            self._failed(exc, group, fsync=True, after=after)
        # release the oldest groups whose fsync (and every earlier one) is done, in order
        flights = self._flights
        while flights and flights[0].done:
            f = flights.popleft()
            if f.dead:
                continue
            self.syncs += 1
            self._succeeded(f)
        if (
            not failed
            and len(flights) < MAX_FSYNCS
            and (self.waiting or self._unsynced_waiters() or self._holding())
        ):
            self._start()

    def _succeeded(self, flight: _Flight) -> None:
        assert flight.fut is not None
        durable = flight.fut.result()
        if self.failure is not None and flight.started > self._failed_at:
            # only an fsync of a point flushed after the failure (the probe) says writes work
            # again; one that was in flight when a write failed covers older writes only
            log.warning(
                "disk writes succeed again (%s earlier); unblocking publishers", self.failure
            )
            self.failure = None
            self.release(lambda: self.broker.set_alarm("disk_write", None))
        self._settle(flight.log_position, durable, self.failure is None, flight.group)

    def _settle(self, log_position: int, durable: int, healthy: bool, group: _Group) -> None:
        # A group whose local rule is met (fsynced: `_done`; written: `_written`): released
        # now, or parked until the followers' gate covers its shard-log position.
        gate = self.replica_gate
        if gate is not None and (self._parked or not gate.covers(log_position)):
            self._parked.append((log_position, durable, healthy, group))
        else:
            self.released_log_position = max(self.released_log_position, log_position)
            self._release(durable, healthy, group)

    def _unsynced_waiters(self) -> bool:
        # durable waiters that need another fsync (not those a group in flight covers, nor
        # those parked behind the followers)
        covered = self._syncing_to if self._flights else self.store.durable_position
        return any(position > covered for position, _ in self._durable_waiters)

    def _failed(
        self, exc: OSError, group: _Group, *, fsync: bool, after: int | None = None
    ) -> None:
        """A flush or fsync failed: nack `group`, raise the alarm (logged once per episode).
        `after`: the last position still to be released (default: the newest group's in
        flight, or the durable one)."""
        self._failed_at = self._starts
        group = group + self.waiting  # confirms held meanwhile cannot be covered either
        self.waiting = []
        self._wake(0, exc)
        if after is None:
            live = [f.position for f in self._flights if not f.dead]
            after = live[-1] if live else self.store.durable_position
        self._unstored(after)
        if group:
            self.loop.call_soon(self._nack, group)
        if self.failure is not None:
            return
        what = "fsync" if fsync else "write"
        where = exc.filename or self.store.directory
        fenced = self.store.fenced
        then = (
            "no more persistent writes until restart (the kernel may have dropped the pages)"
            if fenced
            else "retrying every sweep"
        )
        self.failure = f"{what} failed: {where}: {exc.strerror or exc}"
        log.error(
            "disk %s failed on %s: errno %s (%s); %d confirms nacked, publishers blocked, %s",
            what,
            where,
            errno.errorcode.get(exc.errno or 0, exc.errno),
            exc.strerror or exc,
            len(group),
            then,
        )
        reason = f"disk alarm: {self.failure}"
        self.loop.call_soon(self.release, lambda: self.broker.set_alarm("disk_write", reason))

    def _unstored(self, after: int) -> None:
        # Every write after what an fsync covered (or the ones in flight that still count
        # will cover) failed with this group: its messages leave their queues unseen
        # (hold.py), before the nacks.
        self.loop.call_soon(self.release, lambda: self.broker.unstored(after))

    def _nack(self, group: _Group) -> None:
        self.failed_groups += 1
        fail = self.broker.fail_unconfirmed
        by_channel: dict[tuple[int, int], list[int]] = {}
        for conn_id, channel, seq in group:
            by_channel.setdefault((conn_id, channel), []).append(seq)

        def run() -> list[Effect]:
            effects: list[Effect] = []
            for (conn_id, channel), seqs in by_channel.items():
                effects.extend(fail(conn_id, channel, seqs))
            return effects

        self.release(run)

    def _confirm(self, group: _Group) -> list[Effect]:
        by_channel: dict[tuple[int, int], list[int]] = {}
        for conn_id, channel, seq in group:
            by_channel.setdefault((conn_id, channel), []).append(seq)
        effects: list[Effect] = []
        for (conn_id, channel), seqs in by_channel.items():
            effects.extend(self.broker.confirm_stored(conn_id, channel, seqs))
        return effects

    async def close(self) -> None:
        """Wait for the running fsyncs and stop (the broker's `close()` does the final sync)."""
        for flight in list(self._flights):
            if flight.fut is None:
                continue
            try:
                await asyncio.wrap_future(flight.fut, loop=self.loop)
            except Exception:
                log.debug("last fsync failed at shutdown", exc_info=True)
        self._closed = True
        self._wake(0, OSError(errno.ESHUTDOWN, "broker shutting down"))
        self._executor.shutdown(wait=True)
