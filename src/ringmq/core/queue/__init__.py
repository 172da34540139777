"""The queue engine, one package: `Queue` and the values and ports it uses.

`engine.Queue` is the façade the broker calls (its module docstring has the theory of
operation); the other modules each own one part, and the stateful ones open with their own
theory of operation and invariants:

* `lanes`: entries and per-priority lanes (where waiting messages wait);
* `paging`: `PagedTail`, the spilled tail, its store and the in-memory bound;
* `scheduler`: `Scheduler`, scheduled messages by due time;
* `browse`: building and reading the browse index, index-free reads;
* `limits`: the counted-set rules, fast-path thresholds, the Qpid ring's age order;
* `deadletters`: `DeadLetters`, the outbox the broker drains;
* `records`: outcomes, deliveries, dead letters, counters, constants;
* `ports`: the body and spill store Protocols and their in-memory versions.
"""

from __future__ import annotations

from ringmq.core.queue.engine import Queue
from ringmq.core.queue.ports import (
    BodyStore,
    MemoryBodyStore,
    MemorySpillStore,
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
    "ScheduledMessage",
    "SpillStore",
    "Spilled",
]
