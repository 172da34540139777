"""`MemoryStore`: a `Store` that keeps everything in memory (tests, transient-only brokers).

Theory of operation
-------------------
It owns one dict of live messages per queue (seq -> `RecoveredMessage`), the durable
definitions and the de-duplication window, and a write position bumped by every mutating
call. A position is durable as soon as `fsync()` (or `sync()`) has seen it; nothing is ever
written anywhere. `recover()` returns the current live contents, as after a clean in-process
restart, so engine tests can exercise recovery without files. One owner thread, no locks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from ringmq.core.message import Message, SeqId
from ringmq.storage.dedup import Window
from ringmq.storage.port import RecoveredMessage, RecoveredState, SyncPoint


class MemoryStore:
    """A `Store` that keeps everything in memory (tests, transient-only brokers).

    Positions are durable as soon as `sync()`/`fsync()` runs. `recover()` returns the current
    live contents (as after a clean in-process restart), so engine tests can exercise recovery.
    """

    def __init__(self) -> None:
        self._position = 0
        self._durable = 0
        self._queues: dict[str, dict[int, RecoveredMessage]] = {}
        self._next_seq: dict[str, int] = {}
        self._defs: dict[str, dict[str, Any]] = {}
        self._dedup: Window = {}

    @property
    def position(self) -> int:
        return self._position

    @property
    def durable_position(self) -> int:
        return self._durable

    def _bump(self) -> int:
        self._position += 1
        return self._position

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
        self._queues.setdefault(queue, {})[seq] = RecoveredMessage(
            seq, message, delivery_count > 0, delivery_count, expiry_ms, due_ms
        )
        self._next_seq[queue] = max(self._next_seq.get(queue, 0), seq + 1)
        return self._bump()

    def ack(self, queue: str, seqs: Iterable[SeqId]) -> int:
        q = self._queues.get(queue, {})
        for seq in seqs:
            q.pop(seq, None)
        return self._bump()

    def delivered(
        self, queue: str, seq: SeqId, delivery_count: int, *, due_ms: int | None = None
    ) -> int:
        entry = self._queues.get(queue, {}).get(seq)
        if entry is not None:
            entry.delivery_count = delivery_count
            entry.redelivered = delivery_count > 0
            entry.due_ms = due_ms
        return self._bump()

    def drop_queue(self, queue: str) -> int:
        self._queues.pop(queue, None)
        return self._bump()

    def put_definition(self, kind: str, key: str, value: Mapping[str, Any]) -> int:
        self._defs.setdefault(kind, {})[key] = dict(value)
        return self._bump()

    def delete_definition(self, kind: str, key: str) -> int:
        self._defs.get(kind, {}).pop(key, None)
        return self._bump()

    def tx_begin(self) -> None:
        return None

    def tx_commit(self) -> int:
        return self._bump()

    def flush(self) -> SyncPoint:
        return SyncPoint(self._position)

    def write_out(self) -> int:
        return self._position

    def fsync(self, point: SyncPoint) -> int:
        self._durable = max(self._durable, point.position)
        return point.position

    def sync(self) -> int:
        return self.fsync(self.flush())

    def recover(self) -> RecoveredState:
        return RecoveredState(
            clean=True,
            definitions={k: dict(v) for k, v in self._defs.items() if v},
            queues={q: [m[s] for s in sorted(m)] for q, m in self._queues.items() if m},
            next_seq=dict(self._next_seq),
            dedup={scope: OrderedDict(ids) for scope, ids in self._dedup.items() if ids},
        )

    def dedup_record(self, scope: str, message_id: str, at_ms: int) -> int:
        ids = self._dedup.setdefault(scope, OrderedDict())
        ids[message_id] = at_ms
        ids.move_to_end(message_id)
        return self._bump()

    def dedup_discard(self, scope: str, message_id: str) -> int:
        self._dedup.get(scope, OrderedDict()).pop(message_id, None)
        return self._bump()

    def dedup_due(self) -> bool:
        return False

    def dedup_rewrite(self, window: Mapping[str, Iterable[tuple[str, int]]]) -> None:
        self._dedup = {scope: OrderedDict(ids) for scope, ids in window.items()}

    def close(self) -> None:
        self.sync()
