"""The queue engine, one package: `Queue` and the values and ports it uses.

`engine.Queue` is the façade the broker calls: it keeps the public API and the inlined
publish/fetch/ack fast paths (its module docstring has the theory of operation and the
measurement that keeps them inline). Each other module owns one part, and the stateful ones
open with their own theory of operation and invariants:

* `contents`: `Contents`, where entries are (lanes, unacked map, paged tail, body store, LVQ
  index) and the primitive moves out of them (pop, remove from the middle, forget, purge);
* `overflow`: `Overflow`, the limit, admission under it and eviction (ring, drop-head, Qpid);
* `settle`: `Settlement`, requeue and reject of unacked messages, the delivery limit;
* `expiry`: `Expiry`, the TTL and expiring the head of the queue;
* `scheduler`: `Scheduler`, scheduled messages by due time;
* `deadletters`: `DeadLetters`, the outbox the broker drains;
* `views`: `QueueViews`, `Queue`'s read-only surface (counts, stats, O(n) listings);
* `lanes`: entries and per-priority lanes (where waiting messages wait);
* `paging`: `PagedTail`, the spilled tail, its store and the in-memory bound;
* `browse`: building and reading the browse index, index-free reads;
* `select`: the bounded scan for the first message a selector matches;
* `limits`: the counted-set rules, fast-path flags and thresholds, the Qpid ring's age order;
* `records`: outcomes, deliveries, dead letters, counters, constants;
* `ports`: the body and spill store Protocols and their in-memory versions.

No module reads another module's (or object's) private names: what a collaborator needs is a
public name of its owner or is passed explicitly.

This package must not import server/, storage/ or asyncio. Bodies that leave memory go through
the `BodyStore` port (`MemoryBodyStore` by default; the storage layer provides a real one) or,
for the spilled tail, the `SpillStore` port (`MemorySpillStore` here; storage has a disk one).

`Queue`'s public API (used by the broker layer):

* `Queue(name, settings, *, body_store=None, spill=None)`
* paging: `set_spill(store)`, `set_body_store(store)`, `set_memory_bound(count, nbytes)`,
  `memory_bound`, `page_out()`, `spilled`, `pageable`, `close()`
* `plain`: no setting changes what a publish does (limits.py `FastPaths.of`, the one rule;
  `paths` holds all its answers): the property every publish path with a fast one reads
* `publish_run(msgs, now_ms)`, `publish_columns(run)` and `takes_runs`: runs of plain
  publishes in one step (ingest.py)
* `publish(msg, now_ms) -> PublishOutcome` (ENQUEUED, SCHEDULED, REJECTED: nack the publisher,
  DROPPED: accepted then discarded by policy, ack the publisher as RabbitMQ does)
* `fetch(now_ms, ack_required=True) -> Delivery | None`; `fetch_matching(match, scan, now_ms,
  ack_required)` and `has_matching(match, scan, now_ms)` for selector consumers (select.py)
* `ack(seqs)`, `requeue(seqs, now_ms, *, count_failure=True)`, `reject(seqs, now_ms)`,
  `purge() -> int`
* `tick(now_ms)`, `next_deadline_ms() -> int | None`, `drop_expired(now_ms) -> int`
* `drain_dead_letters() -> list[DeadLetter]`
* `update_settings(settings, now_ms)`, `would_refuse(n, nbytes)`
* `browse(after, now_ms) -> Delivery | None`, `browse_many(after, limit, now_ms)`,
  `browse_ready(after, limit, now_ms)`, `head_seq() -> SeqId | None` (lowest ready or unacked
  seq; builds no browse index)
* `list_scheduled()`, `purge_scheduled() -> int`, `deliver_scheduled_now(seqs, now_ms) -> int`
* storage: `on_remove` (callback for engine-internal removals), `on_delay` (callback for
  delayed redeliveries), `timing_of(msg, now_ms)`,
  `restore(seq, msg, ...)`, `restore_spilled(...)` and `resume_seqs(next_seq)` (recovery)
* `counters` (`QueueCounters`), `stats() -> dict`, `ready_count`, `unacked_count`,
  `message_count`, `over_limit`, `non_destructive`, `last_seq`
* introspection (O(n), management and tests): `ready_view()`, `ready_seqs()`,
  `ready_messages()`, `unacked_seqs()`
"""

from __future__ import annotations

from ringmq.core.queue.engine import Queue
from ringmq.core.queue.ports import (
    BodyStore,
    MemoryBodyStore,
    MemorySpillStore,
    RunColumns,
    Spilled,
    SpillStore,
)
from ringmq.core.queue.records import (
    DEFAULT_HEAD_BYTES,
    DEFAULT_HEAD_COUNT,
    SCHEDULE_HEADERS,
    SCHEDULED_RELEASE_BATCH,
    DeadLetter,
    DeadLetterReason,
    Delivery,
    PublishOutcome,
    QueueCounters,
    ScheduledMessage,
)

__all__ = [
    "DEFAULT_HEAD_BYTES",
    "DEFAULT_HEAD_COUNT",
    "SCHEDULED_RELEASE_BATCH",
    "SCHEDULE_HEADERS",
    "BodyStore",
    "DeadLetter",
    "DeadLetterReason",
    "Delivery",
    "MemoryBodyStore",
    "MemorySpillStore",
    "PublishOutcome",
    "Queue",
    "QueueCounters",
    "RunColumns",
    "ScheduledMessage",
    "SpillStore",
    "Spilled",
]
