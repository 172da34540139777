"""The read-only surface of a queue: counts, limit state, snapshots and O(n) listings.

Theory of operation
-------------------
`QueueViews` is `Queue`'s base class and holds no state of its own: it is given the queue's
`QueueCounters`, its `Contents` and its `Scheduler` (`__init__`) and answers from them. The
O(1) views read the counters, which the owners keep up to date incrementally; `settings` is
the queue's current effective settings (`Queue._apply` replaces it). The O(n) listings
`unacked_seqs` and `list_scheduled` read what memory holds anyway. The `ready_*` listings
(`ready_view`, `ready_seqs`, `ready_messages`) are for tests: they bring a spilled tail back
into memory first (the next publish pages the excess out again) and read bodies paged one by
one in place, so no management read may call them (a queue page polled every few seconds
would hold a paged backlog in memory). `head_seq` builds no browse index (which would page the
whole queue in and stop paging it; browse.py) and `head_message` pages nothing in.

Nothing here changes what a consumer or a publisher sees; `Queue` (engine.py) owns the calls
that do.
"""

from __future__ import annotations

from typing import Any

from ringmq.core.message import Message, SeqId
from ringmq.core.queue import browse
from ringmq.core.queue.contents import Contents
from ringmq.core.queue.limits import describe, over, refusal
from ringmq.core.queue.records import Delivery, QueueCounters, ScheduledMessage
from ringmq.core.queue.scheduler import Scheduler
from ringmq.core.settings import QueueSettings

__all__ = ["QueueViews"]


class QueueViews:
    """Read-only views of one queue (see the module docstring)."""

    def __init__(
        self,
        settings: QueueSettings,
        counters: QueueCounters,
        contents: Contents,
        scheduler: Scheduler,
    ) -> None:
        self.settings = settings
        self.counters = counters
        self._view_contents = contents
        self._view_scheduler = scheduler

    # --- O(1) ----------------------------------------------------------------------------

    @property
    def ready_count(self) -> int:
        """Messages that can be fetched now (ready + paged)."""
        c = self.counters
        return c.ready + c.paged

    @property
    def unacked_count(self) -> int:
        """Messages delivered and not yet acknowledged."""
        return self.counters.unacked

    @property
    def message_count(self) -> int:
        """ready + delivering + scheduled + paged (Artemis `messageCount`)."""
        return self.counters.message_count

    def __len__(self) -> int:
        return self.counters.message_count

    @property
    def non_destructive(self) -> bool:
        """Consumers must `browse` (with a per-consumer cursor) instead of `fetch`."""
        return self.settings.non_destructive

    @property
    def over_limit(self) -> bool:
        """The counted messages reach the limit (the broker blocks publishers under BLOCK)."""
        limit = self.settings.limit
        return limit is not None and over(limit, self.counters, 1, 0)

    def would_refuse(self, n: int, nbytes: int) -> str | None:
        """Why a reject-publish limit would refuse `n` more messages of `nbytes` bytes in all.

        None when they fit, or when the queue has no reject-type limit. Transactions ask this
        for a whole commit before applying any of it; the counted set is the one `publish`
        checks (ready + paged, plus acquired when the limit counts them).
        """
        return refusal(self.settings.limit, self.counters, n, nbytes)

    def stats(self) -> dict[str, Any]:
        """A snapshot of every counter plus the limit (snake_case, for management)."""
        out = self.counters.snapshot()
        out["limit"] = describe(self.settings.limit)
        return out

    @property
    def memory_bound(self) -> tuple[int, int]:
        """The configured in-memory head bound: (ready messages, ready body bytes)."""
        paging = self._view_contents.paging
        return paging.bound_n, paging.bound_b

    @property
    def spilled(self) -> int:
        """Messages in the paged tail (part of `counters.paged`)."""
        return self._view_contents.paging.spilled

    @property
    def paged_in_memory(self) -> tuple[int, int]:
        """Messages and body bytes counted in `counters.paged` whose bodies are still in
        memory: the paged tail's buffer of new publishes not yet handed to the spill store
        (below `SPILL_BATCH` messages and `SPILL_BATCH_BYTES`, paging.py)."""
        paging = self._view_contents.paging
        return paging.buffered, paging.buffered_bytes

    # --- O(n): management and tests ------------------------------------------------------

    def head_seq(self) -> SeqId | None:
        """The lowest seq of a waiting (ready) or unacked message; None when there is none.

        Scheduled messages do not count. Unlike `browse`, this builds no browse index: when
        the spilled tail may hold a lower seq than memory (browse.py), one read-ahead batch is
        paged in, as a fetch would.
        """
        contents = self._view_contents
        best = browse.head_seq(contents)
        raw = contents.raw.lowest()  # rows held raw (rawtake.py) are unacked too
        return raw if raw is not None and (best is None or raw < best) else best

    def head_message(self) -> Message | None:
        """The message the next fetch would take, read in place; None when none is ready.

        Bounded work whatever the depth: the head in memory, or the paged tail's front read
        where it lies (`browse.head_message`); nothing is paged in and the counters do not
        move (the management API's head message timestamp).
        """
        return browse.head_message(self._view_contents)

    def ready_seqs(self) -> list[SeqId]:
        """Waiting messages' seqs in delivery order (O(n); tests and management only)."""
        return [e.seq for e in self._view_contents.ready_entries()]

    def ready_view(self) -> list[Delivery]:
        """Waiting messages in delivery order as `Delivery` values (delivery_count: so far).

        O(n); for tests, management "get messages" previews and debugging.
        """
        contents = self._view_contents
        body = contents.body
        return [
            Delivery(e.seq, body(e), e.redelivered, e.deliveries) for e in contents.ready_entries()
        ]

    def unacked_seqs(self) -> list[SeqId]:
        """Unacked seqs in delivery order (rows held raw, rawtake.py, after the others)."""
        contents = self._view_contents
        return [*contents.unacked, *contents.raw.seqs()]

    def ready_messages(self) -> list[Message]:
        """Waiting messages in delivery order (paged ones are peeked from the store)."""
        contents = self._view_contents
        body = contents.body
        return [body(e) for e in contents.ready_entries()]

    def list_scheduled(self) -> list[ScheduledMessage]:
        """Scheduled messages by due time (Artemis `listScheduledMessages`)."""
        return self._view_scheduler.listing()
