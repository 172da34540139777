"""Group commit: fsync the store off the loop, then release the confirms it covers.

Theory of operation
-------------------
The broker writes persistent messages, acks and definitions to the store as it handles
commands; nothing is durable until an fsync covers it. After every read batch the server calls
`after_batch()` on the loop thread:

1. the confirms the broker held back (`Broker.drain_unconfirmed()`) join `waiting`;
2. if there are waiting confirms and no fsync is running, `store.flush()` hands every buffered
   write to the OS (on the loop thread: the store's owner) and `store.fsync(point)` runs in a
   one-thread executor, so the loop keeps reading and writing meanwhile;
3. when the fsync completes, every confirm of that group is released through
   `Broker.confirm_stored` (the session coalesces contiguous tags into `multiple=true`); the
   confirms that arrived during the fsync form the next group, started at once.

One fsync is in flight at a time, so a burst of N publishes costs about one fsync per group
rather than N (RabbitMQ's and Artemis' group commit). Writes without a waiting confirm (acks,
deliveries) are handed to the OS at the end of the batch and made durable by the next group or by
`tick()` (called from the server's periodic sweep), at most a sweep period later.

Only the loop thread calls these methods; the executor thread only runs `store.fsync`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ringmq.core.effects import Effect
from ringmq.storage.store import Store, SyncPoint

log = logging.getLogger(__name__)


class GroupCommit:
    """Group-commit fsync for one broker and its store (see the module docstring).

    Args:
        broker: the core `Broker` (`drain_unconfirmed`, `confirm_stored`).
        store: its store.
        loop: the broker's event loop.
        release: runs a function producing effects as one server batch (applies and flushes).
    """

    def __init__(
        self,
        broker: Any,
        store: Store,
        loop: asyncio.AbstractEventLoop,
        release: Callable[[Callable[[], list[Effect]]], None],
    ) -> None:
        self.broker = broker
        self.store = store
        self.loop = loop
        self.release = release
        self.waiting: list[tuple[int, int, int]] = []
        self.in_flight: asyncio.Future[int] | None = None
        self._flushed = store.position
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ringmq-fsync")
        self._closed = False
        self.syncs = 0
        """fsyncs completed (for tests and metrics)."""

    def after_batch(self) -> None:
        """End of a batch: collect held confirms, start a group fsync or hand writes to the OS."""
        if self._closed:
            return
        held = self.broker.drain_unconfirmed()
        if held:
            self.waiting.extend(held)
        if self.in_flight is None and self.waiting:
            self._start()
        elif self.store.position > self._flushed:
            self._flushed = self.store.flush().position

    def tick(self) -> None:
        """Periodic: make writes that no confirm waited for durable too."""
        if self._closed or self.in_flight is not None:
            return
        if self.store.durable_position < self.store.position:
            self._start()

    def _start(self) -> None:
        group, self.waiting = self.waiting, []
        point: SyncPoint = self.store.flush()
        self._flushed = point.position
        fut = self.loop.run_in_executor(self._executor, self.store.fsync, point)
        self.in_flight = fut
        fut.add_done_callback(lambda f: self._done(f, group))

    def _done(self, fut: asyncio.Future[int], group: list[tuple[int, int, int]]) -> None:
        self.in_flight = None
        if self._closed:
            return
        exc = fut.exception() if not fut.cancelled() else None
        if fut.cancelled() or exc is not None:
            # The data may not be on disk: never confirm it (clients see no ack, as with a
            # crashed broker). Retry with the next group.
            log.error("store fsync failed: %r; %d confirms withheld", exc, len(group))
            self.waiting[:0] = group
            return
        self.syncs += 1
        if group:
            self.release(lambda: self._confirm(group))
        if self.waiting and self.in_flight is None:
            self._start()

    def _confirm(self, group: list[tuple[int, int, int]]) -> list[Effect]:
        by_channel: dict[tuple[int, int], list[int]] = {}
        for conn_id, channel, seq in group:
            by_channel.setdefault((conn_id, channel), []).append(seq)
        effects: list[Effect] = []
        for (conn_id, channel), seqs in by_channel.items():
            effects.extend(self.broker.confirm_stored(conn_id, channel, seqs))
        return effects

    async def close(self) -> None:
        """Wait for the running fsync and stop (the broker's `close()` does the final sync)."""
        fut = self.in_flight
        if fut is not None:
            try:
                await asyncio.shield(fut)
            except Exception:
                log.debug("last fsync failed at shutdown", exc_info=True)
        self._closed = True
        self._executor.shutdown(wait=True)
