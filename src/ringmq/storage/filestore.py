"""`FileStore`: the on-disk `Store` (docs/storage.md).

Theory of operation
-------------------
`FileStore` owns the store directory and the writers in it: the queue journal (`Journal`),
the shared body store (`MessageStore`), the definition and de-duplication logs, the write and
durable positions, and the fsync fence. It implements the `Store` port (`port.py`: the calling
protocol); the in-memory index of live entries is a `StoreIndex` (`index.py`) that it alone
mutates, rebuilt at open by `replay.py` or from the recovery terms; entries are read back
through an `EntryReader` (`reader.py`).

Index and recovery: the in-memory index holds, per live message, only its location
(``segment << 64 | offset << 32 | body size``), delivery counts (> 0), shared-body refs and
due times; messages are read back on demand (`read_entries`, `reader.py`). A clean stop saves
that index (`terms.py`); the next open adopts it when it is intact and the files are exactly
those it describes, else replays the journal (decoding only record headers).

Message bodies at or above `embed_below` bytes go to the shared `MessageStore` once per
message (`Message.store_ref` is set on the shared `Message`, so fan-out to N durable queues
stores one body and N small index records); smaller ones are embedded in the ENQUEUE record.

FileStore layout (`docs/storage.md`): `journal/*.seg` (ENQUEUE, ACK, DELIVERY_COUNT, PURGE,
TX_BEGIN, TX_COMMIT records), `msgstore/*.msg` (BODY records), `definitions/` (snapshot+log),
`RECOVERY_TERMS` and `CLEAN` (present only between a clean close and the next open),
`paging/` (page files of recovered backlogs, wiped at open).

Space reclamation (`_maintain`, run at every `flush()`; `reclaim.py`): a closed segment is
deleted when none of its ENQUEUEs is live and no segment its ACK/PURGE/TX records depend on
still exists (so an ACK never disappears before the ENQUEUE it cancels). When the oldest segment
is mostly dead, or dead segments chained behind live ones outweigh them, its live entries are
copied forward into the current segment and it is deleted once the copies are durable.

Write failures (ENOSPC, EDQUOT, EIO; docs/storage.md, "Write failures"): a failed `write`
is cut back to the last good byte and its records stay buffered; `flush()` raises the OSError
and `failure` says so until a later `flush()` writes them (same bytes, same offsets), so
nothing confirmed is touched and the failed tail is never counted as written. A failed `fsync`
*fences* the store: the kernel may have dropped the dirty pages and a later fsync would not
cover them, so from then on `flush()` raises, nothing more is written, and `close()` leaves no
recovery terms: the next start replays the journal, whose checksums decide what survived.
Everything an earlier fsync covered stays as it was.

Single owner: all methods except `fsync` run on one thread (the loop). No locks. `fsync` is
`sync_files` (the descriptors' fsyncs: several points may run them at once, on different
threads) then `synced` (tracking renames, the durable position), which the caller runs in
point order (server/commit.py).
"""

from __future__ import annotations

import contextlib
import errno
import gc
import logging
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from ringmq.core.message import Message, SeqId
from ringmq.core.storeport import queue_key
from ringmq.core.streamlog import StreamSpec
from ringmq.storage import terms
from ringmq.storage.bodystore import DiskSpillStore, SpillDirectory
from ringmq.storage.dedup import DedupLog
from ringmq.storage.definitions import DefinitionLog
from ringmq.storage.index import StoreIndex
from ringmq.storage.journal import DEFAULT_SEGMENT_BYTES, Journal, fsync_fds
from ringmq.storage.msgstore import MessageStore
from ringmq.storage.port import RecoveredState, SyncPoint
from ringmq.storage.reader import EntryReader, QueueCopies, RecoveredQueue
from ringmq.storage.reclaim import Reclaimer
from ringmq.storage.records import (
    Entry,
    RecordType,
    encode_ack,
    encode_delivery,
    encode_message,
    encode_purge,
)
from ringmq.storage.replay import replay
from ringmq.storage.replica import read_state
from ringmq.storage.shardlog import ShardLog
from ringmq.storage.streamdirs import StreamFiles
from ringmq.storage.streamfiles import FileStreamLog

log = logging.getLogger(__name__)

DEFAULT_EMBED_BELOW: Final = 4096
"""RabbitMQ's `queue_index_embed_msgs_below` default."""
_PURGE_ALL: Final = (1 << 64) - 1
_NO_BATCH: Final = contextlib.nullcontext()
"""`write_out` and `flush` without a shard log (with one: `ShardLog.batch`)."""


class FileStore:
    """The on-disk `Store` (see the module docstring and docs/storage.md)."""

    def __init__(
        self,
        directory: Path,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        msg_segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        embed_below: int = DEFAULT_EMBED_BELOW,
        spill_directory: Path | None = None,
    ) -> None:
        """Open (creating if needed) a store directory and replay it.

        Prefer `FileStore.open`. The replayed state is kept until `recover()` takes it.
        `spill_directory` (default `<directory>/paging`, wiped at open) is the broker's one
        paging directory: recovered backlogs page there, and `spills` hands it to live paging.
        """
        self.directory = directory
        self.embed_below = embed_below
        held = read_state(directory)
        if held is not None and held.syncing:
            # a follower's copy whose bulk sync was cut short: a mix of old and new files
            raise ValueError(
                f"{directory} is a replica whose bulk sync did not finish (SHARD says "
                "syncing): it holds no consistent state; follow the leader again to finish it"
            )
        directory.mkdir(parents=True, exist_ok=True)
        self._journal = Journal(directory / "journal", segment_bytes=segment_bytes)
        self._bodies = MessageStore(directory / "msgstore", segment_bytes=msg_segment_bytes)
        self._defs = DefinitionLog(directory / "definitions")
        self._dedup = DedupLog(directory / "dedup")
        self.streams = StreamFiles(directory / "streams")
        """Stream queues' segment files (streamfiles.py), fsynced with the journal."""
        self._position = 0
        self._durable = 0
        self.index = StoreIndex(self._bodies)  # live entries and segment accounting
        self._reader = EntryReader(directory, self._journal, self._bodies, self.index)
        self._reclaim = Reclaimer(self._journal, self.index)
        self._tx_seg: int | None = None
        self._fenced: OSError | None = None  # a failed fsync: nothing more is written
        self._fenced_at = 0  # the sync point whose fsync failed (`synced` refuses later ones)
        self._pending_fds: list[int] = []  # handed out by a flush that then failed
        self.shard_log: ShardLog | None = None
        """Records every write once replication attaches it (`attach_log`)."""
        clean_marker = directory / "CLEAN"
        self._clean = clean_marker.exists()
        # The paging directory: page files are transient, so it starts empty (SpillDirectory
        # wipes it). Recovered backlogs and live paging share it and its disk-health source.
        own = directory / "paging"
        if spill_directory is not None and own.exists():
            shutil.rmtree(own)  # left by a version that paged recovered backlogs here
        self.spills = SpillDirectory(
            spill_directory or own,
            copies=lambda vhost, name: self.copies(queue_key(vhost, name)),
        )
        self.used_terms = False
        # Replay allocates a few objects per message and no cycles; the cyclic GC would
        # rescan the growing heap again and again (a quarter of the replay time at 100k).
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            if self._clean and self.index.load_terms(directory, self._journal):
                self.used_terms = True
            else:
                replay(self._journal, self._bodies, self.index, directory)
            self._recovered: RecoveredState | None = self._recovered_state()
        finally:
            if gc_was_enabled:
                gc.enable()
        terms.discard(directory)  # never usable again: the files change from now on
        if self._clean:
            clean_marker.unlink()
        # start appending in a fresh segment and make the marker removal durable
        self._journal.roll()
        fsync_fds(self._fsync_dir_fds())

    @classmethod
    def open(cls, directory: Path | str, **options: Any) -> FileStore:
        """Open a store directory (see `__init__` for options)."""
        return cls(Path(directory), **options)

    def _fsync_dir_fds(self) -> list[int]:
        return [os.open(self.directory, os.O_RDONLY)]

    def _recovered_state(self) -> RecoveredState:
        dirty = not self._clean
        state = RecoveredState(clean=self._clean, definitions=self._defs.all())
        for q, qi in self.index.locations.items():
            if qi:
                state.queues[q] = RecoveredQueue(self, q, sorted(qi), redeliver_all=dirty)
        state.next_seq = dict(self.index.next_seq)
        return state

    # -- the port ----------------------------------------------------------------------------

    @property
    def position(self) -> int:
        return self._position

    @property
    def durable_position(self) -> int:
        return self._durable

    @property
    def failure(self) -> OSError | None:
        """The write or fsync error the store is stuck on (None when healthy)."""
        if self._fenced is not None:
            return self._fenced
        for j in (self._journal, self._bodies.journal):
            if j.poisoned:
                return j.failure or OSError(errno.EIO, "journal tail unknown", str(j.directory))
        return (
            self._journal.failure
            or self._bodies.journal.failure
            or self._defs.failure
            or self._dedup.failure
        )

    @property
    def fenced(self) -> bool:
        """True after a failed fsync (or an uncuttable write): no more writes until restart."""
        return self._fenced is not None or self._journal.poisoned or self._bodies.journal.poisoned

    def recover(self) -> RecoveredState:
        """Return (once) what the replay at open found."""
        state = self._recovered
        assert state is not None, "recover() is called once, right after open"
        self._recovered = None
        state.dedup = self._dedup.recovered()
        return state

    def enqueue(
        self,
        queue: str,
        seq: SeqId,
        message: Message,
        *,
        expiry_ms: int | None = None,
        due_ms: int | None = None,
        delivery_count: int = 0,
    ) -> int:
        index = self.index
        qindex = index.locations.get(queue)
        if qindex is None:
            qindex = index.locations[queue] = {}
        elif seq in qindex:  # re-enqueue of a live seq: the new record replaces the old one
            index.forget(queue, seq)
        ref = 0
        size = len(message.body)
        if size >= self.embed_below:
            ref = message.store_ref
            if ref == 0 or not self._bodies.incref(ref):
                ref = self._bodies.put(message.body)
                message.store_ref = ref
            index.refs.setdefault(queue, {})[seq] = ref
        seg, offset = self._journal.append(
            RecordType.ENQUEUE,
            encode_message(queue, seq, message, delivery_count, expiry_ms, due_ms, False, ref),
        )
        # The index entry is written here, not through a StoreIndex method: this is the
        # publish hot path, and that call measured ~2% of a 1 KiB enqueue+flush (4.46 against
        # 4.36 us CPU per op, store before the split alternated in one process, tmpfs, no
        # fsync). Same fields as `replay` fills.
        qindex[seq] = (seg << 64) | (offset << 32) | size
        seg_live = index.seg_live
        seg_live[seg] = seg_live.get(seg, 0) + 1
        seg_total = index.seg_total
        seg_total[seg] = seg_total.get(seg, 0) + 1
        if delivery_count:
            index.counts.setdefault(queue, {})[seq] = delivery_count
        if due_ms is not None:
            index.due.setdefault(queue, {})[seq] = due_ms
        if expiry_ms is not None:
            index.expiring.add(queue)
        next_seq = index.next_seq
        if seq + 1 > next_seq.get(queue, 0):
            next_seq[queue] = seq + 1
        self._position += 1
        return self._position

    def read_entries(self, queue: str, seqs: Sequence[int]) -> list[Entry]:
        """Read live entries of `queue` back from the journal, in the given order.

        Large bodies are resolved from the message store; delivery counts are the current
        ones. Consecutive entries are read in windows of the segment, not one by one. Raises
        `LookupError` for a seq that is not live and `RuntimeError` for a damaged record.
        """
        return self._reader.read(queue, seqs)

    def copies(self, queue: str) -> QueueCopies:
        """`queue`'s journaled messages for a page file: a paged persistent message is then
        written as a reference and read back from the journal (no second copy)."""
        return QueueCopies(self._reader, queue)

    def spill_for(
        self, queue: str, seqs: Sequence[int], nbytes: int | None = None
    ) -> DiskSpillStore:
        """A spill store for `queue` holding the live `seqs` (in order) as journal references,
        in the store's paging directory (`spills`)."""
        return self.spills.restored(
            self.copies(queue), seqs if isinstance(seqs, list) else list(seqs), nbytes
        )

    def ack(self, queue: str, seqs: Iterable[SeqId]) -> int:
        found: list[int] = []
        segs: set[int] = set()
        forget = self.index.forget
        for seq in seqs:
            seg = forget(queue, seq)
            if seg is not None:
                found.append(seq)
                segs.add(seg)
        if found:
            at, _ = self._journal.append(RecordType.ACK, encode_ack(queue, found))
            for seg in segs:
                self.index.depend(at, seg)
        self._position += 1
        return self._position

    def delivered(
        self, queue: str, seq: SeqId, delivery_count: int, *, due_ms: int | None = None
    ) -> int:
        index = self.index
        seg = index.set_count(queue, seq, delivery_count, due_ms)
        if seg is not None:
            at, _ = self._journal.append(
                RecordType.DELIVERY_COUNT, encode_delivery(queue, seq, delivery_count, due_ms)
            )
            index.depend(at, seg)  # the count must not vanish while its ENQUEUE stays
        self._position += 1
        return self._position

    def drop_queue(self, queue: str) -> int:
        segs = self.index.forget_queue(queue)
        at, _ = self._journal.append(RecordType.PURGE, encode_purge(queue, _PURGE_ALL))
        for seg in segs:
            self.index.depend(at, seg)
        self._position += 1
        return self._position

    def put_definition(self, kind: str, key: str, value: Mapping[str, Any]) -> int:
        self._defs.put(kind, key, value)
        self._position += 1
        return self._position

    def delete_definition(self, kind: str, key: str) -> int:
        self._defs.delete(kind, key)
        self._position += 1
        return self._position

    def dedup_record(self, scope: str, message_id: str, at_ms: int) -> int:
        """`message_id` was accepted in de-duplication `scope` at `at_ms` (`dedup.py`)."""
        self._dedup.record(scope, message_id, at_ms)
        self._position += 1
        return self._position

    def dedup_discard(self, scope: str, message_id: str) -> int:
        """Forget an id of `scope` (its publish was refused after all)."""
        self._dedup.discard(scope, message_id)
        self._position += 1
        return self._position

    def dedup_due(self) -> bool:
        """True when the dedup log should be rewritten with the live window."""
        return self._dedup.due()

    def dedup_rewrite(self, window: Mapping[str, Iterable[tuple[str, int]]]) -> None:
        """Replace the dedup log with the live window, durably (synchronous fsync)."""
        self._dedup.rewrite(window)

    def open_stream(self, key: str, spec: StreamSpec, name: str = "") -> FileStreamLog:
        """The stream queue `name` of store key `key` (recovered, or created empty)."""
        return self.streams.open_stream(key, spec, name)

    def definitions(self) -> dict[str, dict[str, Any]]:
        """Current durable definitions (kind -> key -> value)."""
        return self._defs.all()

    def tx_begin(self) -> None:
        assert self._tx_seg is None, "transactions do not nest"
        self._tx_seg, _ = self._journal.append(RecordType.TX_BEGIN, b"")

    def tx_commit(self) -> int:
        assert self._tx_seg is not None, "tx_commit without tx_begin"
        at, _ = self._journal.append(RecordType.TX_COMMIT, b"")
        self.index.depend(at, self._tx_seg)  # the COMMIT must outlive its BEGIN
        self._tx_seg = None
        self._position += 1
        return self._position

    def flush(self) -> SyncPoint:
        # bump first: anything appended by _maintain (copied-forward records) is covered by
        # this point and by no earlier one
        if self.fenced:
            raise self.failure or OSError(errno.EIO, "store fenced")
        self._position += 1
        self.index.flushes += 1  # the clock of seg_acked_at
        if self._tx_seg is None and self.failure is None:
            self._maintain()
        # bodies first (records refer to them); a failure keeps what was handed out so far
        # for the next successful point, and leaves the rest buffered
        fds, self._pending_fds = self._pending_fds, []
        shard_log = self.shard_log
        try:
            with self._one_batch():
                fds += self._bodies.journal.flush()
                fds += self._journal.flush()
                fds += self._defs.flush()
                fds += self._dedup.flush()
                fds += self.streams.flush(self._position)
        except OSError:
            self._pending_fds = _one_per_file(fds)
            raise
        return SyncPoint(
            self._position, tuple(fds), shard_log.position if shard_log is not None else 0
        )

    def write_out(self) -> int:
        # Hand buffered writes to the OS and take no descriptor: no fsync follows yet (the
        # next `flush()` hands over what it needs to cover these writes too).
        if self.fenced:
            raise self.failure or OSError(errno.EIO, "store fenced")
        with self._one_batch():
            self._bodies.journal.write_out()
            self._journal.write_out()
            self._defs.write_out()
            self._dedup.write_out()
            self.streams.write_out()
        return self._position

    def _one_batch(self) -> contextlib.AbstractContextManager[None]:
        # a write-out of several files wakes the followers once (`ShardLog.batch`)
        return _NO_BATCH if self.shard_log is None else self.shard_log.batch()

    def attach_log(self, shard_log: ShardLog) -> None:
        """Record every later write and delete of this store in `shard_log` (replication).

        What is buffered is handed to the OS first, so the files hold everything written
        before the log's first record (a bulk sync copies the files, the log follows)."""
        assert self.shard_log is None, "one shard log per store"
        self.write_out()
        self.shard_log = shard_log
        self._journal.tap = shard_log
        self._bodies.journal.tap = shard_log
        self._defs.file.tap = shard_log
        self._dedup.file.tap = shard_log
        self.streams.attach(shard_log)

    def relog_pending(self) -> None:
        """A bulk sync's copy starts at the shard log's position now: record again the content
        of the files whose copy on disk is older than the log says (stream tracking files
        waiting for the fsync before their rename), so the records after the copy's position
        bring the follower level (`shardlog.py`)."""
        self.streams.relog()

    def fsync(self, point: SyncPoint) -> int:
        self.sync_files(point)
        return self.synced(point)

    def sync_files(self, point: SyncPoint) -> None:
        """The first half of `fsync`: fsync and close the point's descriptors. Several points
        may be at it at once, on different threads (the group commit's fsyncs in flight):
        each point owns its descriptors."""
        try:
            fsync_fds(list(point.fds))
        except OSError as exc:
            self._fence(exc, point.position)
            raise

    def synced(self, point: SyncPoint) -> int:
        """The second half of `fsync`, once `sync_files(point)` and that of every earlier
        point are done (the caller keeps that order): the tracking files the point covered
        go in place and the durable position moves to it. Raises the fence when an earlier
        point's fsync failed: what came after it counts as never written."""
        fenced = self._fenced
        if fenced is not None and self._fenced_at < point.position:
            raise fenced
        try:
            self.streams.synced(point.position)  # tracking files this point covered
        except OSError as exc:
            self._fence(exc, point.position)
            raise
        # a plain int store is atomic under the GIL; only ever moves forward
        if point.position > self._durable:
            self._durable = point.position
        return point.position

    def _fence(self, exc: OSError, position: int) -> None:
        # the kernel may have dropped the dirty pages ("fsyncgate"): never trust a later
        # fsync to cover them; stop writing (a plain store is atomic under the GIL)
        if self._fenced is None:
            self._fenced, self._fenced_at = exc, position

    def sync(self) -> int:
        return self.fsync(self.flush())

    def close(self) -> None:
        """Sync, close files, and leave the CLEAN marker for a fast, exact next start.

        After a write failure that a last try cannot clear, or a fenced store: close without
        writing anything more (no terms, no CLEAN): the next start replays the journal."""
        if not self.fenced:
            try:
                self.sync()
            except OSError as exc:
                log.error(
                    "store %s: final sync failed (%s); the next start replays", self.directory, exc
                )
        if self.failure is not None:
            self.abandon()
            return
        self._journal.close()
        self._bodies.journal.close()
        self._defs.close()
        self._dedup.close()
        self.streams.close()
        if self._tx_seg is None:
            self.index.save_terms(self.directory, self._journal)
        (self.directory / "CLEAN").write_bytes(b"")
        fsync_fds(self._fsync_dir_fds())

    def abandon(self) -> None:
        """Release descriptors WITHOUT flushing buffered writes: a simulated crash (tests).

        What was already handed to the OS (`flush()`) stays in the files; the buffers are lost,
        exactly as when the process is killed.
        """
        for journal in (self._journal, self._bodies.journal):
            journal.abandon()
        self._defs.abandon()
        self._dedup.abandon()
        self.streams.abandon()
        for fd in self._pending_fds:
            os.close(fd)
        self._pending_fds = []

    # -- space reclamation -------------------------------------------------------------------

    def _maintain(self) -> None:
        self._reclaim.run(self._position, self._durable)
        self._bodies.maintain(self._position, self._durable)

    # -- introspection (tests, management) ---------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Counters: live messages, segments, disk bytes, shared bodies."""
        return {
            "messages": self.index.message_count(),
            "segments": len(self._journal.segments),
            "journal_bytes": self._journal.disk_bytes(),
            "msgstore_files": len(self._bodies.journal.segments),
            "msgstore_bytes": self._bodies.journal.disk_bytes(),
            "shared_bodies": len(self._bodies),
        }

    def body_refcount(self, ref: int) -> int:
        """Reference count of a shared body (0 when gone)."""
        return self._bodies.refcount(ref)


def _one_per_file(fds: list[int]) -> list[int]:
    # A failed flush keeps what it was handed for the next one; each retry (every sweep while
    # the alarm is on) is handed a new copy of the same current segments' descriptors. An
    # fsync covers a file whatever descriptor wrote it, so one per file is enough: the copies
    # are closed and the pending list stays bounded by the files, not by the retries.
    seen: set[tuple[int, int]] = set()
    kept: list[int] = []
    for fd in fds:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) in seen:
            os.close(fd)
        else:
            seen.add((st.st_dev, st.st_ino))
            kept.append(fd)
    return kept
