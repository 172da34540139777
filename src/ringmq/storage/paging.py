"""Paging: per-queue page files for messages pushed out of memory, and the body spill.

Theory of operation
-------------------
The queue engine keeps a bounded *head* of each queue in memory (by count and bytes) and the
rest in a `PageQueue` (RabbitMQ >= 3.12's `q_head` / `q_tail`). A `PageQueue` is an ordered
deque of *runs*; each run is a file of PAGED records (`records.py` framing, one message entry
each, in queue order) and PAGED_RUN records (a run of plain messages with one exchange and
routing key, as columns: `pageruns.py`; the front record may be partly read, `PageRun.skip`).
The record loops live beside this module: `pagetake.py` (page-in and peek into entries) and
`pagerows.py` (peek into browse columns); the browses are `pagepeek.PagePeeks`', a base of
`PageQueue`. Order is the caller's, never re-sorted here:

* `push_back(entries)` appends after everything paged (new publishes while a tail exists).
* `push_front(entries)` puts a run *before* everything paged (the engine evicting the rear of
  its in-memory head under memory pressure: those messages precede the paged tail).
* `pop_front(max_count, max_bytes)` reads the next batch in order (paging in); a run file is
  deleted as soon as it has been read through.
* `discard(seq, size)` leaves a tombstone for a paged message removed out of order (expiry,
  LVQ replacement, purge by seq); it is skipped when read.
* `peek_after(after, limit)` reads without taking (a browse); `peek_columns` does the same into
  browse columns straight from the records, building no message (`pagerows.py`), from the
  page file mapped into memory rather than read (`_view`): its page-run rows stay views of the
  mapping until the browse's answer is joined, one copy less than a read.

So a message's place is decided once, by the engine, and every path (publish, requeue into the
head, page out of the head's rear, page in from the front) keeps queue order. Page files are
transient: `Pager` wipes its directory when it starts, so paged data never survives a restart
(persistent messages are also in the journal and come back through `Store.recover`).

**Persistent messages are not written twice.** Given `copies` (the store's view of one queue's
journaled messages, `DurableCopies`), a paged persistent message (only those are journaled, and
only they are looked up) that is live in the journal is written as a
small PAGED_REF record (seq and body size) instead of a whole PAGED record, and read back from
the journal (`copies.read`, batched) when paged in. The store keeps a journal segment while any
of its entries is live, and a paged message stays live until it is paged in and acked, so the
reference always resolves (copy-forward only moves the entry; the store's index follows it).
A recovered backlog is a *memory run*: just the list of its seqs (`restore`), no file at all.

`pager.Pager` is the broker's paging directory: one `PageQueue` per queue and one `BodySpill`
(`bodyspill.py`, the Qpid `flow_to_disk` body hand-off), all wiped at start.

Each run's file is a `pagefile.RunFile` (its buffer, writes, reads and mapping). Files only;
no fsync (nothing here has to survive a crash). One owner thread.

Write failures (ENOSPC...): a page file write that fails is cut back to its last good byte and
its records stay in the run's buffer, i.e. in memory, over the queue's head bound: nothing is
lost, reads stitch file and buffer, and writes are retried (at seal, at read, every
`_RETRY_EVERY` appends). The shared `DiskHealth` holds the error until a write succeeds; the
memory monitor turns it into the disk alarm that blocks publishers.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, Protocol

from ringmq.core.message import Message
from ringmq.core.queue.ports import RunColumns, Spilled
from ringmq.storage.pagefile import DiskHealth, RunFile
from ringmq.storage.pagepeek import PagePeeks
from ringmq.storage.pageruns import RunRows, column_records, encode_run, plain, run_end
from ringmq.storage.pagetake import Taken, item_of, take_records, take_runs
from ringmq.storage.records import (
    HEADER,
    HEADER_SIZE,
    PAGE_TYPE_CRC,
    Entry,
    RecordType,
    encode_entry,
    encode_message,
    encode_paged_ref,
    page_crc,
)

DEFAULT_RUN_BYTES: Final = 4 * 1024 * 1024
DEFAULT_READ_BYTES: Final = 512 * 1024
_STORE_REF: Final = struct.Struct("<Q")
_PAGED_REF: Final = int(RecordType.PAGED_REF)
_PAGED: Final = int(RecordType.PAGED)
_PAGED_RUN: Final = int(RecordType.PAGED_RUN)


_RETRY_EVERY: Final = 64  # appends between write retries while page writes fail


def _encode_paged(entry: Entry) -> bytes:
    # the body is always embedded in page files; keep the message's shared-store ref alongside
    # so a persistent message paged in still deduplicates when re-routed
    ref = entry.message.store_ref
    if entry.body_ref:
        entry = replace(entry, body_ref=0)
    return _STORE_REF.pack(ref) + encode_entry(entry)


class DurableCopies(Protocol):
    """One queue's messages that are live in the journal (`FileStore.copies(queue)`)."""

    def holds(self, seq: int) -> bool:
        """Whether `seq` has a live journal copy."""
        ...

    def size(self, seq: int) -> int:
        """Body size of a live `seq`."""
        ...

    def read(self, seqs: Sequence[int]) -> list[Entry]:
        """Read live entries back, in the given order."""
        ...


@dataclass(slots=True)
class PageRun:
    file: RunFile | None  # None: a memory run (`seqs`, read from the journal)
    count: int = 0  # records not yet read
    body_bytes: int = 0
    read_offset: int = 0
    seqs: list[int] | None = None  # memory run: journaled seqs, read from `read_offset` on
    last_seq: int = -1  # highest seq appended (runs hold increasing seqs): browses skip past it
    skip: int = 0  # rows of the PAGED_RUN record at `read_offset` already read (pageruns.py)

    @property
    def appending(self) -> bool:
        """Whether records may still be appended: a page file not yet sealed."""
        return self.file is not None and self.file.appending


class PageQueue(PagePeeks):
    """One queue's paged-out messages, in queue order (see the module docstring)."""

    def __init__(
        self,
        directory: Path,
        *,
        run_bytes: int = DEFAULT_RUN_BYTES,
        read_bytes: int = DEFAULT_READ_BYTES,
        copies: DurableCopies | None = None,
        health: DiskHealth | None = None,
    ) -> None:
        self.directory = directory
        self.run_bytes = run_bytes
        self.read_bytes = read_bytes
        self.copies = copies
        self.health = health or DiskHealth()
        self._since_retry = 0
        self._made_dir = False
        self._runs: deque[PageRun] = deque()
        self._next_name = 0
        self._count = 0
        self._bytes = 0
        self._tombstones: dict[int, int] = {}  # seq -> body size
        self.pages_written = 0
        self.pages_read = 0
        self.refs_written = 0  # PAGED_REF records (persistent messages paged by reference)
        self.runs_written = 0  # PAGED_RUN records (runs of plain messages as columns)
        self.bytes_paged = 0  # record bytes appended to page files

    # -- sizes -------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Paged messages still to be read (tombstoned ones excluded)."""
        return self._count - len(self._tombstones)

    def __bool__(self) -> bool:
        return len(self) > 0

    @property
    def body_bytes(self) -> int:
        """Sum of the paged bodies still to be read."""
        return self._bytes - sum(self._tombstones.values())

    # -- writing -----------------------------------------------------------------------------

    def _new_run(self) -> PageRun:
        if not self._made_dir:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._made_dir = True
        self._next_name += 1
        return PageRun(RunFile(self.directory / f"{self._next_name:010d}.page"))

    def _appending(self) -> PageRun | None:
        # The back run while records may be appended to it.
        run = self._runs[-1] if self._runs else None
        return run if run is not None and run.appending else None

    def _append(self, run: PageRun, entry: Entry) -> None:
        size = len(entry.message.body)
        copies = self.copies
        if copies is not None and entry.message.persistent and copies.holds(entry.seq):
            self._add(run, _PAGED_REF, encode_paged_ref(entry.seq, size), entry.seq, size)
            self.refs_written += 1
        else:
            self._add(run, _PAGED, _encode_paged(entry), entry.seq, size)

    def _add(
        self, run: PageRun, rtype: int, payload: bytes, seq: int, size: int, count: int = 1
    ) -> None:
        # Frame one record (of `count` messages, the last `seq`) into the run's buffer (as
        # records.frame does) and count it.
        head = HEADER.pack(len(payload), page_crc(payload, PAGE_TYPE_CRC[rtype]), rtype)
        self._add_frames(run, [head, payload], HEADER_SIZE + len(payload), count, size, seq)

    def _add_frames(
        self, run: PageRun, parts: list[bytes], nbytes: int, count: int, body_bytes: int, last: int
    ) -> None:
        # Append `count` framed records (`parts`: headers and payloads, `nbytes` in all, of
        # `body_bytes` bodies, the last with seq `last`) to the run's buffer and count them.
        file = self._file(run)
        file.append(parts, nbytes, self.health)
        self.bytes_paged += nbytes
        run.last_seq = last
        run.count += count
        run.body_bytes += body_bytes
        self._count += count
        self._bytes += body_bytes
        self.pages_written += count
        if file.buffered >= self.read_bytes:
            if self.health.failure is None:
                file.write_out(self.health)
            else:
                self._since_retry += count
                if self._since_retry >= _RETRY_EVERY:
                    self._since_retry = 0
                    file.write_out(self.health)

    def restore(self, seqs: list[int], nbytes: int | None = None) -> None:
        """Append journaled messages by seq only (a recovered backlog), after everything
        paged: a memory run, read back through `copies`. `nbytes`: their body bytes, when
        the caller knows them."""
        assert self.copies is not None, "restore() needs the journal copies"
        if not seqs:
            return
        if nbytes is None:
            size = self.copies.size
            nbytes = sum(size(s) for s in seqs)
        back = self._appending()
        if back is not None:
            self._file(back).seal(self.health)
        self._runs.append(
            PageRun(None, count=len(seqs), body_bytes=nbytes, seqs=seqs, last_seq=seqs[-1])
        )
        self._count += len(seqs)
        self._bytes += nbytes

    def push_back(self, entries: Iterable[Entry]) -> None:
        """Append entries after everything already paged, in the given order."""
        for entry in entries:
            self._append(self._back(), entry)

    def _back(self) -> PageRun:
        # The run to append to: the open back run, sealed and replaced once it is full.
        run = self._appending()
        if run is None or self._file(run).size >= self.run_bytes:
            if run is not None:
                self._file(run).seal(self.health)
            run = self._new_run()
            self._runs.append(run)
        return run

    def push_back_spilled(self, items: Sequence[tuple[int, Message, int | None]]) -> None:
        """`push_back` of an engine's spilled messages, `(seq, message, expires_at)`, encoded
        straight from them (what `push_back` writes for `Entry("", seq, message,
        expiry_ms=expires_at)`, without building the entries). Consecutive plain messages
        with one exchange and routing key go as PAGED_RUN records (`pageruns.py`)."""
        # The run roll-over of `push_back`, the PAGED_REF choice of `_append` and the framing
        # of `_add` are inlined here on purpose, and the records are counted once per run
        # (`_add_frames`): this is every spilled publish's path, and calling them as helpers
        # cost 5-15 % of a page-out (benchmarks/paging_bench.py, alternated runs).
        run = self._appending()
        copies = self.copies
        holds = None if copies is None else copies.holds
        ref_of = _STORE_REF.pack
        head_of = HEADER.pack
        crc32c = page_crc
        paged_crc = PAGE_TYPE_CRC[_PAGED]
        parts: list[bytes] = []
        pending = count = body_bytes = 0
        last = -1
        i = 0
        n = len(items)
        while i < n:
            seq, message, expires_at = items[i]
            j, size = run_end(items, i, holds) if plain(message, expires_at) else (i + 1, 0)
            if run is None or self._file(run).size + pending >= self.run_bytes:
                if run is not None:
                    if count:
                        self._add_frames(run, parts, pending, count, body_bytes, last)
                        parts = []
                        pending = count = body_bytes = 0
                    self._file(run).seal(self.health)
                run = self._new_run()
                self._runs.append(run)
            if j - i > 1:
                payload = encode_run(items[i:j])
                self.runs_written += 1
                parts += (
                    head_of(len(payload), crc32c(payload, PAGE_TYPE_CRC[_PAGED_RUN]), _PAGED_RUN),
                )
                seq = items[j - 1][0]
            else:
                j = i + 1
                size = len(message.body)
                if copies is not None and message.persistent and copies.holds(seq):
                    payload = encode_paged_ref(seq, size)
                    parts += (
                        head_of(
                            len(payload), crc32c(payload, PAGE_TYPE_CRC[_PAGED_REF]), _PAGED_REF
                        ),
                    )
                    self.refs_written += 1
                else:
                    payload = encode_message(
                        "", seq, message, 0, expires_at, prefix=ref_of(message.store_ref)
                    )
                    parts += (head_of(len(payload), crc32c(payload, paged_crc), _PAGED),)
            parts.append(payload)
            pending += HEADER_SIZE + len(payload)
            count += j - i
            body_bytes += size
            last = seq
            i = j
        if count:
            assert run is not None
            self._add_frames(run, parts, pending, count, body_bytes, last)

    def push_back_run(self, seqs: Sequence[int], run: RunColumns) -> None:
        """`push_back_spilled` of the messages of `run` with `seqs` (what it writes for
        `run.messages()`), encoded straight from the columns as PAGED_RUN records."""
        copies = self.copies
        if copies is not None and 1 in run.persistent:
            holds = copies.holds
            if any(p and holds(q) for p, q in zip(run.persistent, seqs, strict=True)):
                # journaled copies are paged by reference, message by message
                msgs = run.messages()
                self.push_back_spilled([(q, m, None) for q, m in zip(seqs, msgs, strict=True)])
                return
        for payload, rows, size, last in column_records(seqs, run):
            self._add(self._back(), _PAGED_RUN, payload, last, size, rows)
            self.runs_written += 1

    def push_front(self, entries: Sequence[Entry]) -> None:
        """Page out entries that precede everything already paged (given in queue order)."""
        if not entries:
            return
        run = self._new_run()
        for entry in entries:
            self._append(run, entry)
        self._file(run).seal(self.health)
        self._runs.appendleft(run)

    # -- reading -----------------------------------------------------------------------------

    def pop_front(self, max_count: int, max_bytes: int | None = None) -> list[Spilled]:
        """Read up to `max_count` items `(seq, message, expires_at)` (and about `max_bytes` of
        bodies) from the front.

        Always returns at least one entry when any is paged, so a huge message still moves.
        """
        out: list[Spilled] = []
        got_bytes = 0
        while self._runs and len(out) < max_count:
            run = self._runs[0]
            if run.count == 0:
                self._drop_run(self._runs.popleft())
                continue
            if run.seqs is not None:
                got_bytes += self._pop_memory_run(run, out, max_count, max_bytes, got_bytes)
                if max_bytes is not None and got_bytes >= max_bytes:
                    break
                continue
            file, at = self._file(run), run.read_offset
            data = file.read(at, max(self.read_bytes, 64 * 1024), self.health)
            took, records = self._take(run, data, out, max_count, max_bytes, got_bytes)
            if not records:
                # a single record larger than the read size: read exactly its length
                data = file.read(at, None, self.health)
                took, records = self._take(run, data, out, max_count, max_bytes, got_bytes)
                if not records:
                    raise RuntimeError(f"page file {file.path} is corrupt at {at}")
            got_bytes += took
            if max_bytes is not None and got_bytes >= max_bytes:
                break
        while self._runs and self._runs[0].count == 0 and not self._runs[0].appending:
            self._drop_run(self._runs.popleft())
        return out

    def _take(
        self,
        run: PageRun,
        data: bytes,
        out: list[Spilled],
        max_count: int,
        max_bytes: int | None,
        got: int,
    ) -> tuple[int, int]:
        """Decode the good records at the start of `data` (read at `run.read_offset`) into
        `out` (`pagetake.take_records`), stopping when `out` holds `max_count` or `got` plus
        the bodies taken reaches `max_bytes`; the run's and the queue's counters are updated
        once for the chunk. Returns (body bytes taken, messages passed)."""
        t = take_records(data, run.skip, self._tombstones, out, max_count, max_bytes, got)
        self._passed(run, t)
        if t.refs:
            self._resolve(out, t.refs)
        return t.took, t.records

    def _passed(self, run: PageRun, t: Taken) -> None:
        # What a read took leaves the run's and the queue's counts.
        run.read_offset += t.pos
        run.skip = t.skip
        run.count -= t.records
        run.body_bytes -= t.passed
        self._count -= t.records
        self._bytes -= t.passed
        self.pages_read += t.records

    def pop_raw(self, max_count: int, max_bytes: int | None, first: bool) -> list[RunRows]:
        """`pop_front` of the PAGED_RUN rows at the front, as they are (`pagetake.take_runs`):
        up to `max_count` rows, a row taken while the bodies before it are below `max_bytes`
        (with `first`, the first one always). Stops at the first record of another kind, a
        memory run or a record larger than a read: an empty answer means "page in"."""
        out: list[RunRows] = []
        if self._tombstones:
            return out
        rows = took = 0
        while self._runs and rows < max_count:
            run = self._runs[0]
            if run.count == 0:
                self._drop_run(self._runs.popleft())
                continue
            if run.seqs is not None:
                break
            # The rest of the run file mapped, as a browse maps it (`_view`): the rows stay
            # views of the mapping (one copy less; the answer's join copies them from the page
            # cache), and no chunk cuts a record.
            try:
                data: bytes | memoryview = self._file(run).view(run.read_offset, self.health)
            except OSError:  # no mapping to be had (vm.max_map_count...): read it
                data = self._file(run).read(run.read_offset, None, self.health)
            if len(data) < HEADER_SIZE or HEADER.unpack_from(data)[2] != _PAGED_RUN:
                break  # not a run record: paged in the ordinary way
            room = None if max_bytes is None else max_bytes - took
            t = take_runs(data, run.skip, out, max_count - rows, room, first and not rows)
            if not t.records:
                break
            self._passed(run, t)
            rows += t.records
            took += t.took
            if t.skip or (room is not None and t.took >= room):
                break  # the limits were reached (else read on: another run, or not a run)
        while self._runs and self._runs[0].count == 0 and not self._runs[0].appending:
            self._drop_run(self._runs.popleft())
        return out

    def _pop_memory_run(
        self, run: PageRun, out: list[Spilled], max_count: int, max_bytes: int | None, got: int
    ) -> int:
        # Take the next seqs of a memory run (tombstones skipped); returns the bytes taken.
        assert run.seqs is not None
        assert self.copies is not None
        size = self.copies.size
        seqs = run.seqs
        pos = run.read_offset
        taken: list[int] = []
        nbytes = 0
        limit = max_count - len(out)
        while pos < len(seqs) and len(taken) < limit:
            seq = seqs[pos]
            pos += 1
            n = size(seq)
            run.count -= 1
            run.body_bytes -= n
            self._count -= 1
            self._bytes -= n
            self.pages_read += 1
            if self._tombstones.pop(seq, None) is not None:
                continue
            taken.append(seq)
            nbytes += n
            if max_bytes is not None and got + nbytes >= max_bytes:
                break
        run.read_offset = pos
        if pos >= len(seqs):
            run.seqs = []
        out.extend(map(item_of, self.copies.read(taken)))
        return nbytes

    def discard(self, seq: int, size: int) -> None:
        """Remove a paged message out of order (it is skipped when read)."""
        self._tombstones[seq] = size

    def _drop_run(self, run: PageRun) -> None:
        if run.file is not None:
            run.file.delete()

    def clear(self) -> None:
        """Forget everything paged and delete the files (purge, queue deletion)."""
        while self._runs:
            self._drop_run(self._runs.popleft())
        self._count = 0
        self._bytes = 0
        self._tombstones.clear()

    def files(self) -> int:
        """Number of run files (tests, metrics); memory runs are not files."""
        return sum(1 for run in self._runs if run.file is not None)
