"""Resources: paging bounds, resource alarms, Artemis BLOCK, publisher flow.

Theory of operation
-------------------
`Resources` owns everything that limits publishers for the broker's sake rather than for a
queue's own rules:

* **Paging.** With a data directory the server calls `enable_paging` with a spill factory
  (`storage.bodystore.SpillDirectory`): every queue then keeps at most `head_count` ready
  messages / `head_bytes` ready body bytes in memory and pages the rest (`new_queue` builds
  queues so). Queues with a flow-to-disk limit (Qpid flow_to_disk, Artemis PAGE) also get a
  body store. `set_memory_bound` tightens every queue under memory pressure.
* **Alarms** (RabbitMQ's memory and disk alarms): while one is on, a connection that publishes
  is blocked (`Block`: connection.blocked, reading paused) right after that publish; clearing
  the last alarm unblocks it unless an Artemis BLOCK queue still holds it.
* **Artemis address-full BLOCK**: a publish that leaves a BLOCK queue over its limit blocks the
  publisher until the queue is back under it (`maybe_unblock`, after each dispatch of the
  queue) or deleted. Blocks are kept per connection as a set of keys: negative keys for the
  alarms, `id(queue)` for BLOCK queues, so one `Unblock` is sent when the last key goes.
* **Publisher flow** (RabbitMQ's credit flow, in one thread): a publish that leaves an
  unbounded queue *with consumers* holding more than `FLOW_HIGH` ready messages (or
  `FLOW_HIGH_BYTES`) records `flow_requests[conn_id] = queue`. The server takes these after
  each read (`take_flow`), stops reading that publisher, and reads again once
  `flow_settled(queue)`. The core only reports; pausing is I/O.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ringmq.core.effects import Block, Unblock
from ringmq.core.entities import QueueEntity
from ringmq.core.queue import DEFAULT_HEAD_BYTES, DEFAULT_HEAD_COUNT, BodyStore, Queue, SpillStore
from ringmq.core.settings import LimitAction, QueueSettings
from ringmq.core.state import State

FLOW_HIGH: Final = 8192
"""Ready backlog of a consumed queue above which its publisher is asked to pause (`flow`)."""
FLOW_LOW: Final = 2048
"""Ready backlog at or below which a paused publisher may read again."""
FLOW_HIGH_BYTES: Final = 4 * 1024 * 1024
"""The same high mark in ready body bytes (half the default in-memory queue head: no paging)."""
FLOW_LOW_BYTES: Final = 1024 * 1024
"""The same low mark in ready body bytes."""

_ALARM_KEYS: Final = {"memory": -1, "disk": -2, "disk_write": -3}
"""Resource alarms share the per-connection block sets with BLOCK queues (id(queue) > 0)."""


class Resources:
    """Paging, alarms, BLOCK/FAIL and publisher flow (see the module docstring)."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.alarms_on: dict[str, str] = {}
        """Resource alarms in force: resource -> reason (read on every publish: empty is fast)."""
        self.blocked_by: dict[int, tuple[QueueEntity, set[int]]] = {}
        """BLOCK queue id -> (queue, blocked conn ids); empty unless a BLOCK queue is full."""
        self._blocking: dict[int, set[int]] = {}  # conn id -> keys of what blocks it
        self._spill_factory: Callable[[str, str], SpillStore] | None = None
        self._body_factory: Callable[[str, str], BodyStore] | None = None
        self._head_bound = (DEFAULT_HEAD_COUNT, DEFAULT_HEAD_BYTES)
        self.flow_requests: dict[int, QueueEntity] = {}
        """Publishers (conn id) whose last publish left a consumed queue over FLOW_HIGH."""

    # ------------------------------------------------------------------ paging
    def new_queue(self, vhost: str, name: str, settings: QueueSettings) -> Queue:
        """An engine queue for a new declaration, paging beyond its head when enabled."""
        factory = self._spill_factory
        if factory is None:
            return Queue(name, settings)
        q = Queue(name, settings, spill=factory(vhost, name))
        q.set_memory_bound(*self._head_bound)
        self.flow_to_disk(vhost, q)
        return q

    def flow_to_disk(self, vhost: str, q: Queue) -> None:
        """Qpid flow_to_disk / Artemis PAGE limits page bodies one by one: give them disk."""
        limit = q.settings.limit
        if (
            self._body_factory is not None
            and limit is not None
            and limit.action is LimitAction.FLOW_TO_DISK
        ):
            q.set_body_store(self._body_factory(vhost, q.name))

    def enable_paging(
        self,
        spill_factory: Callable[[str, str], SpillStore],
        head_count: int = DEFAULT_HEAD_COUNT,
        head_bytes: int = DEFAULT_HEAD_BYTES,
        body_store_factory: Callable[[str, str], BodyStore] | None = None,
    ) -> None:
        """Let every queue (existing and future) page beyond an in-memory head.

        `spill_factory(vhost, queue)` returns a fresh `SpillStore` per queue (the server passes
        `storage.bodystore.SpillDirectory`). Queues then keep at most `head_count` ready
        messages / `head_bytes` ready body bytes in memory; see `set_memory_bound`.
        `body_store_factory(vhost, queue)`, when given, backs queues declared with a
        flow-to-disk limit (Qpid flow_to_disk, Artemis PAGE), whose bodies past the limit are
        written out one by one and read back on delivery.
        """
        self._spill_factory = spill_factory
        self._body_factory = body_store_factory
        self._head_bound = (head_count, head_bytes)
        for vh in self.state.vhosts.values():
            for q in vh.queues.values():
                q.queue.set_spill(spill_factory(vh.name, q.name))
                q.queue.set_memory_bound(head_count, head_bytes)
                self.flow_to_disk(vh.name, q.queue)

    @property
    def memory_bound(self) -> tuple[int, int]:
        """The per-queue in-memory head bound in force: (messages, body bytes)."""
        return self._head_bound

    def set_memory_bound(self, head_count: int, head_bytes: int) -> int:
        """Change every queue's in-memory bound (the server tightens it under memory
        pressure); a lower bound pages the excess out at once. Returns messages paged out."""
        self._head_bound = (head_count, head_bytes)
        paged = 0
        for vh in self.state.vhosts.values():
            for q in vh.queues.values():
                before = q.queue.spilled
                q.queue.set_memory_bound(head_count, head_bytes)
                paged += max(0, q.queue.spilled - before)
        return paged

    def memory_held_bytes(self) -> int:
        """Message body bytes held in memory by all queues (paged bodies excluded); O(queues)."""
        return sum(
            q.queue.counters.memory_bytes
            for vh in self.state.vhosts.values()
            for q in vh.queues.values()
        )

    # ------------------------------------------------------------------ alarms and blocks
    def set_alarm(self, resource: str, reason: str | None) -> None:
        """Raise (`reason` given) or clear (None) a resource alarm; clearing the last one
        unblocks the connections it blocked (effects on the call's `out`)."""
        key = _ALARM_KEYS[resource]
        if reason is not None:
            self.alarms_on[resource] = reason
            return
        if self.alarms_on.pop(resource, None) is None:
            return
        out = self.state.out
        for conn_id in sorted(self._blocking):
            blocking = self._blocking[conn_id]
            if key in blocking:
                blocking.discard(key)
                if not blocking:
                    del self._blocking[conn_id]
                    out.append(Unblock(conn_id))

    def alarm_publish(self, conn_id: int) -> None:
        """A publish while an alarm is on: block this connection (once per alarm)."""
        blocking = self._blocking.setdefault(conn_id, set())
        was_blocked = bool(blocking)
        reasons = []
        for resource, reason in sorted(self.alarms_on.items()):
            key = _ALARM_KEYS[resource]
            if key not in blocking:
                blocking.add(key)
                reasons.append(reason)
        if reasons and not was_blocked:
            self.state.out.append(Block(conn_id, "; ".join(reasons)))

    def block(self, conn_id: int, q: QueueEntity) -> None:
        """Artemis address-full-policy BLOCK: stop reading from publishers to a full queue."""
        blocking = self._blocking.setdefault(conn_id, set())
        if not blocking:
            self.state.out.append(Block(conn_id, f"queue '{q.name}' in vhost '{q.vhost}' is full"))
        blocking.add(id(q))
        self.blocked_by.setdefault(id(q), (q, set()))[1].add(conn_id)

    def maybe_unblock(self, q: QueueEntity) -> None:
        """Unblock the publishers `q` blocked once it is under its limit again or gone."""
        if q.deleted or not q.queue.over_limit:
            entry = self.blocked_by.pop(id(q), None)
            if entry is None:
                return
            for conn_id in sorted(entry[1]):
                blocking = self._blocking.get(conn_id)
                if blocking is None:
                    continue
                blocking.discard(id(q))
                if not blocking:
                    del self._blocking[conn_id]
                    self.state.out.append(Unblock(conn_id))

    def forget_connection(self, conn_id: int) -> None:
        """A connection closed: forget what blocked it."""
        for qid in self._blocking.pop(conn_id, ()):
            entry = self.blocked_by.get(qid)
            if entry is not None:
                entry[1].discard(conn_id)

    # ------------------------------------------------------------------ publisher flow
    def take_flow(self) -> list[tuple[int, QueueEntity]]:
        """Publishers to pause, with the queue they fill; clears the requests.

        A connection that consumes itself is never returned: pausing its reads would also
        stop its acks, and with them the draining it waits for.
        """
        requests = self.flow_requests
        conns = self.state.conns
        out: list[tuple[int, QueueEntity]] = []
        for conn_id, q in requests.items():
            conn = conns.get(conn_id)
            if conn is None or any(s.consumers for s in conn.sessions.values()):
                continue
            out.append((conn_id, q))
        requests.clear()
        return out

    @staticmethod
    def flow_settled(q: QueueEntity) -> bool:
        """True when a publisher paused for `q` may read again."""
        if q.deleted or not q.consumers.fetchers:
            return True
        counters = q.queue.counters
        return q.queue.ready_count <= FLOW_LOW and counters.ready_bytes <= FLOW_LOW_BYTES
