"""Browsing a queue's paged messages without taking them: `PagePeeks`, a base of
`paging.PageQueue`.

Theory of operation
-------------------
`PagePeeks` holds no state of its own: the runs, tombstones, journal copies and disk health it
reads are `PageQueue`'s (paging.py states their theory and invariants). A browse walks the
runs in queue order and changes nothing: runs that end at or below `after` are skipped unread
(`PageRun.last_seq`), tombstoned messages are left out, and a page file's unread rest is read
from its `read_offset` (`peek_after`, into items: `pagetake.peek_entries`) or mapped
(`peek_columns`, into browse columns: `pagerows.peek_rows`, whose page-run rows stay views of
the mapping). Persistent messages paged by reference (PAGED_REF) and memory runs are read
from the journal copies in one batched read (`_resolve`, `_resolve_rows`, which the taking
reads of `PageQueue` share). A corrupt page file where the browse reads it is a RuntimeError.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from ringmq.core.queue.columns import Columns
from ringmq.core.queue.ports import Spilled
from ringmq.storage.pagefile import DiskHealth, RunFile
from ringmq.storage.pagerows import CorruptPageError, fill_refs, journal_rows, peek_rows
from ringmq.storage.pagetake import item_of, peek_entries

if TYPE_CHECKING:  # PageQueue's types (paging.py imports this module)
    from ringmq.storage.paging import DurableCopies, PageRun

__all__ = ["PagePeeks"]


class PagePeeks:
    """The non-destructive reads of one queue's paged messages (see the module docstring)."""

    copies: DurableCopies | None
    health: DiskHealth
    _runs: deque[PageRun]
    _tombstones: dict[int, int]

    def _file(self, run: PageRun) -> RunFile:
        assert run.file is not None, "a memory run has no page file"
        return run.file

    def peek_after(self, after: int | None, limit: int) -> list[Spilled]:
        """Up to `limit` paged items with a seq above `after`, in order, without taking them
        (a browse). Runs that end at or below `after` are skipped unread; tombstoned entries
        are left out.

        Raises:
            RuntimeError: a page file is corrupt where the browse reads it.
        """
        out: list[Spilled] = []
        low = -1 if after is None else after
        tombstones = self._tombstones
        for run in self._runs:
            if len(out) >= limit:
                break
            if run.count == 0 or run.last_seq <= low:
                continue
            if run.seqs is not None:
                assert self.copies is not None
                want = [s for s in run.seqs[run.read_offset :] if s > low and s not in tombstones]
                out.extend(map(item_of, self.copies.read(want[: limit - len(out)])))
                continue
            data = self._file(run).read(run.read_offset, None, self.health)
            self._peek_records(run, data, low, out, limit)
        return out

    def _peek_records(
        self, run: PageRun, data: bytes, low: int, out: list[Spilled], limit: int
    ) -> None:
        # The records of `data` (the unread rest of `run`) with seq > low into `out`.
        refs, corrupt = peek_entries(data, run.skip, low, self._tombstones, out, limit)
        if corrupt >= 0:
            raise RuntimeError(
                f"page file {self._file(run).path} is corrupt at {run.read_offset + corrupt}"
            )
        if refs:
            self._resolve(out, refs)

    def peek_columns(self, after: int | None, limit: int, now_ms: int, out: Columns) -> int | None:
        """`peek_after` as columns: append to `out`, until it holds `limit` rows, the paged
        messages with a seq above `after`, in order, without building them (`pagerows`);
        tombstoned ones and those expired at `now_ms` are left out.

        Returns the seq of the last record read when it stopped because `out` filled up
        (more may follow that seq; `out` may hold fewer than `limit` rows when journal copies
        read for it had expired), None when everything after `after` was read.

        Raises:
            RuntimeError: a page file is corrupt where the browse reads it.
        """
        low = -1 if after is None else after
        tombstones = self._tombstones
        for run in self._runs:
            if run.count == 0 or run.last_seq <= low:
                continue
            if run.seqs is not None:
                last = self._peek_memory_run(run, low, limit, now_ms, out)
                if len(out) >= limit:
                    return last
                continue
            data = self._file(run).view(run.read_offset, self.health)
            try:
                got = peek_rows(data, run.skip, low, tombstones, now_ms, limit, out)
            except CorruptPageError as exc:
                at = run.read_offset + exc.offset
                raise RuntimeError(f"page file {self._file(run).path} is corrupt at {at}") from None
            full = len(out) >= limit
            if got.refs:
                self._resolve_rows(out, got.refs, now_ms)  # may drop expired rows
            if full:
                return got.last_seq
        return None

    def _peek_memory_run(
        self, run: PageRun, low: int, limit: int, now_ms: int, out: Columns
    ) -> int:
        # The rows of a memory run's unread seqs above `low`, read from the journal.
        assert run.seqs is not None
        assert self.copies is not None
        tombstones = self._tombstones
        want = [s for s in run.seqs[run.read_offset :] if s > low and s not in tombstones]
        return journal_rows(self.copies.read, want, low, limit, now_ms, out)

    def _resolve_rows(self, out: Columns, refs: list[tuple[int, int]], now_ms: int) -> None:
        # PAGED_REF placeholder rows, filled from the journal copies (one batched read).
        assert self.copies is not None, "a page file holds references but no journal is given"
        fill_refs(out, refs, self.copies.read([s for _, s in refs]), now_ms)

    def _resolve(self, out: list[Spilled], refs: list[tuple[int, int]]) -> None:
        # PAGED_REF records: read the journal copies (one batched read) into their places.
        assert self.copies is not None, "a page file holds references but no journal is given"
        for (i, _), entry in zip(refs, self.copies.read([s for _, s in refs]), strict=True):
            out[i] = item_of(entry)
