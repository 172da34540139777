"""Which ready messages stay in memory: `QueueMemoryBound`, a base class of `Queue`.

Theory of operation
-------------------
`QueueMemoryBound` holds no state of its own: the attributes it names are `Queue`'s (engine.py),
set by `Queue.__init__`, and the paged tail it steers is `Contents.paging` (paging.py states
that tail's theory and invariants). A queue pages only when it has a spill store and is
`pageable` (its settings allow it, `FastPaths.pageable`, and it has no browse index); the bound
(`set_memory_bound`, tightened by the broker under memory pressure) is the paged tail's, and
`_apply_bound` copies its effective bounds to `Queue`'s hot-path aliases `_head_n/_b` whenever
the bound, the spill store, the settings or the browse index change (never per message). Bodies
paged one by one (flow-to-disk limits) go to the body store (`set_body_store`); `close` releases
both when the queue is deleted.
"""

from __future__ import annotations

from ringmq.core.queue.contents import Contents
from ringmq.core.queue.lanes import Entry, Lane
from ringmq.core.queue.limits import FastPaths
from ringmq.core.queue.paging import PagedTail
from ringmq.core.queue.ports import BodyStore, SpillStore

__all__ = ["QueueMemoryBound"]


class QueueMemoryBound:
    """The memory bound and paging of one queue (see the module docstring)."""

    paths: FastPaths
    _index: list[Entry] | None
    _contents: Contents
    _paging: PagedTail
    _lane: Lane
    _head_n: int
    _head_b: int

    @property
    def pageable(self) -> bool:
        """Whether this queue can page its tail (given a spill store): its settings allow it
        (`FastPaths.pageable`: single lane, no LVQ, no limit that needs envelopes in memory)
        and it has no browse index."""
        return self.paths.pageable and self._index is None

    def _apply_bound(self) -> None:
        paging = self._paging
        paging.set_active(paging.spill is not None and self.pageable, self._lane.tail)
        self._head_n, self._head_b = paging.head_n, paging.head_b

    def set_spill(self, spill: SpillStore) -> None:
        """Give the queue a spill store (paging starts within the current bound)."""
        if self._paging.spill is None:
            self._paging.spill = spill
            self._apply_bound()
            self.page_out()

    def set_memory_bound(self, count: int, nbytes: int) -> None:
        """Bound the ready messages held in memory; the rest pages (needs a spill store). A
        lower bound pages the excess out at once; a higher one lets fetches page more in."""
        self._paging.bound_n = count
        self._paging.bound_b = nbytes
        self._apply_bound()
        self.page_out()

    def page_out(self) -> int:
        """Page the rear of the in-memory tail out until memory is within the bound; returns
        how many messages moved (never-delivered ones from the tail's rear only: paging.py)."""
        return self._contents.page_out()

    def set_body_store(self, store: BodyStore) -> bool:
        """Use `store` for bodies paged one by one (flow-to-disk limits). Refused (False)
        while bodies are paged in the current store."""
        return self._contents.set_store(store)

    def close(self) -> None:
        """The queue is deleted: release its paged data (spilled tail and paged bodies)."""
        self._contents.close()
