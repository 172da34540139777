"""A run of publishes into one queue at once: `QueueIngest`, a base class of `Queue`.

Theory of operation
-------------------
`QueueIngest` holds no state of its own: the attributes it names are `Queue`'s (engine.py),
set by `Queue.__init__`. `publish_run` is `Queue.publish` done for many messages that need no
per-message decision (no headers, no expiration: the caller's guard): when the queue is plain
(no option at all) and already pages its new messages behind the spill (the case of a Spark
sink's backlog), `publish` would only give each its seq and push it to the paged tail, so the
run is given consecutive seqs and handed to the paged tail in one step
(`PagedTail.push_run`: one framed write of the run to the page file). Any other queue, or a
queue not yet paging, takes every message through `publish` itself: the outcome is then that
of `publish`, one message after the other. `publish_columns` is `publish_run` for a run given
as columns (`RunColumns`, no `Message` each): its seqs are taken from the counter in one step
and the columns go to the spill store as they are (`PagedTail.push_columns`); only a queue
that `takes_runs` is handed one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import count, islice

from ringmq.core.message import Message, SeqId
from ringmq.core.queue.paging import PagedTail
from ringmq.core.queue.ports import RunColumns
from ringmq.core.queue.records import PublishOutcome, QueueCounters

__all__ = ["QueueIngest"]


class QueueIngest:
    """Run publishes of one queue (see the module docstring)."""

    counters: QueueCounters
    plain: bool
    _paging: PagedTail
    _next_seq: Callable[[], SeqId]
    _seq_counter: count[int]

    def publish(self, msg: Message, now_ms: int) -> PublishOutcome:
        raise NotImplementedError  # Queue's

    @property
    def takes_runs(self) -> bool:
        """Whether `publish_run` enqueues every message of a run (no limit can refuse one, no
        option decides per message): a plain queue whose new messages go behind its spill."""
        return self.plain and self.counters.paged > 0 and self._paging.spilled > 0

    def publish_run(self, msgs: Sequence[Message], now_ms: int) -> list[PublishOutcome] | None:
        """Enqueue `msgs` (none with headers or an expiration) as that many `publish` calls.

        Returns None when every message was enqueued as a run (`takes_runs`), else the
        outcome of each message's `publish`.
        """
        if not self.takes_runs:
            return [self.publish(m, now_ms) for m in msgs]
        next_seq = self._next_seq
        self._paging.push_run([(next_seq(), m, None) for m in msgs])
        return None

    def publish_columns(self, run: RunColumns) -> None:
        """Enqueue the messages of `run` (a queue that `takes_runs`) as `publish_run` does."""
        assert self.takes_runs
        self._paging.push_columns(list(islice(self._seq_counter, len(run))), run)
