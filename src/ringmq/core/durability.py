"""What the broker persists through the `Store` port, and how it comes back at startup.

Theory of operation
-------------------
`Durability` sits between the broker's owners and a store (the storage layer's `Store`; the
core names only the calls it makes, `storeport.StorePort`, so core/ imports nothing from
storage/). It is built from the store and the registry it reads (`ports.Registry`: the
broker's `State`), and knows no broker. It owns:

* **the persisted-seq sets**: for every durable queue, the seqs of its messages that are in the
  store (`is_persistent`: durable queue and delivery_mode 2). Only those produce ACK and
  DELIVERY_COUNT records, so transient traffic through a durable queue writes nothing.
* **engine removals**: each durable queue's engine gets an `on_remove` callback; a seq the
  engine drops by itself (ring eviction, drop-head, LVQ replacement, expiry, purge,
  dead-lettering, delivery limit, no-ack fetch) is acked in the store if it was persisted.
  Client acks go through `acked`; deliveries with ack required through `delivered`. Its
  `on_delay` callback journals a persisted message that a failed delivery holds back
  (Artemis' `redelivery-delay`) with its delivery count and due time, so recovery puts it
  back in the schedule rather than at once on the queue.
* **the durability hold** (`core/queue/hold.py`): under delayed confirms (a group commit
  fsyncs the store), each persistent write to a durable queue whose publisher waits for a
  confirm (or a refusal) is noted in the queue's `Hold` with its store position, so the queue
  hands it to no consumer before an fsync covers it (a publish nobody confirms is never
  refused, so it is not held: a `basic.publish` then `basic.get` finds it at once, as in
  RabbitMQ);
  `stored(position)` releases what an fsync covered and `unstored(after)` refuses what a
  failed write or fsync did not: those messages are acked in the store (a later successful
  write of the same buffered records cannot bring them back) and leave their queues.
* **delayed exchanges**: a persistent message held by a durable `x-delayed-message` exchange
  is journaled under the exchange's own store key (`delayed_key`) with its due time, acked
  when the exchange releases it (after it was routed, so a crash in between duplicates rather
  than loses), and dropped with the exchange. Recovery holds it again.

and delegates the rest, each to the module that owns it:

* **definitions** (`defsync.DefinitionSync`, `self.definitions`): the cache of the durable
  definitions the store holds and the incremental writes after `touch`/`touch_binding`
  (`sync_definitions`).
* **recovery** (`recovery.py`, driven by `recover`, which takes the restore steps and the
  lease books as ports, `ports.Restorer` and `ports.LeaseRecovery`): definitions first, then
  each queue's messages, the de-duplication windows, then the streams API's leases.

Store keys and definition kinds are fixed in `storeport.py` (re-exported here).
Invariants: a seq is in a persisted set iff an ENQUEUE for it was written and no ACK yet; the
broker only writes while it owns the loop thread (no locks).
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ringmq.core.defsync import DefinitionSync
from ringmq.core.message import Message, SeqId
from ringmq.core.queue import PublishOutcome
from ringmq.core.queue.hold import NO_HOLD
from ringmq.core.recovery import restore_definitions, restore_messages, restore_recovered
from ringmq.core.storeport import (
    BINDING,
    DELAYED_PREFIX,
    EXCHANGE_DEF,
    KINDS,
    PERMISSION,
    POLICY,
    QUEUE_DEF,
    SEP,
    USER,
    VHOST,
    LazyRecoveredPort,
    RecoveredMessagePort,
    RecoveredPort,
    RecoveredTailPort,
    StorePort,
    delayed_key,
    queue_key,
)
from ringmq.core.streambooks import LEASE

if TYPE_CHECKING:
    from ringmq.core.entities import QueueEntity
    from ringmq.core.exchange import Exchange
    from ringmq.core.ports import LeaseRecovery, Registry, Restorer

__all__ = [
    "BINDING",
    "DELAYED_PREFIX",
    "EXCHANGE_DEF",
    "KINDS",
    "PERMISSION",
    "POLICY",
    "QUEUE_DEF",
    "SEP",
    "USER",
    "VHOST",
    "Durability",
    "LazyRecoveredPort",
    "RecoveredMessagePort",
    "RecoveredPort",
    "RecoveredTailPort",
    "StorePort",
    "delayed_key",
    "queue_key",
    "restore_recovered",
]


class Durability:
    """The broker's writes to, and recovery from, a store (see the module docstring).

    Args:
        store: the store; every call happens on the broker's thread.
        registry: the broker's definitions (its `State`): read by definition sync, filled
            by recovery.
    """

    def __init__(self, store: StorePort, registry: Registry) -> None:
        self.store = store
        self.registry = registry
        self._persisted: dict[str, set[SeqId]] = {}
        self._by_entity: dict[int, tuple[str, set[SeqId]]] = {}  # id(QueueEntity) -> key, seqs
        self.definitions = DefinitionSync(registry, store, self._drop_held)
        self.holds = registry.config.delay_persistent_confirms
        """Whether persistent writes are held from consumers until durable (hold.py)."""
        self._holding: dict[int, QueueEntity] = {}  # queues whose `Hold` has pending writes
        self.failing = False
        """A write or fsync failed and none succeeded since: persistent publishes to durable
        queues are refused before they are enqueued (`unstored` sets it, `stored` clears it)."""
        self.recovered_messages = 0
        self.clean = True

    # --- queues and messages ----------------------------------------------------------------

    def attach(self, q: QueueEntity) -> None:
        """Start tracking a durable queue: engine removals of persisted seqs become ACKs."""
        key = queue_key(q.vhost, q.name)
        persisted = self._persisted.setdefault(key, set())
        self._by_entity[id(q)] = (key, persisted)
        store = self.store

        def removed(seq: SeqId) -> None:
            if seq in persisted:
                persisted.discard(seq)
                store.ack(key, (seq,))

        def delayed(seq: SeqId, delivery_count: int, due_ms: int) -> None:
            if seq in persisted:
                store.delivered(key, seq, delivery_count, due_ms=due_ms)

        q.queue.on_remove = removed
        q.queue.on_delay = delayed

    def persisted(self, q: QueueEntity) -> set[SeqId] | None:
        """The persisted seqs of a durable queue (None for queues the store ignores)."""
        entry = self._by_entity.get(id(q))
        return entry[1] if entry is not None else None

    def published(
        self,
        q: QueueEntity,
        msg: Message,
        outcome: PublishOutcome,
        now_ms: int,
        *,
        hold: bool = False,
    ) -> bool:
        """After `q.queue.publish(msg)`: persist it when it stayed. Returns True if written.

        `hold`: its publisher waits for a confirm (or a refusal), so under delayed confirms
        consumers get it only once an fsync covers the write (hold.py)."""
        if outcome is not PublishOutcome.ENQUEUED and outcome is not PublishOutcome.SCHEDULED:
            return False
        entry = self._by_entity.get(id(q))
        if entry is None:
            return False
        engine = q.queue
        seq = engine.last_seq
        expiry_ms, due_ms = engine.timing_of(msg, now_ms)
        position = self.store.enqueue(entry[0], seq, msg, expiry_ms=expiry_ms, due_ms=due_ms)
        entry[1].add(seq)
        if hold and self.holds:
            pending = engine.hold.pending
            if not pending:
                self._holding[id(q)] = q
                if engine.hold_from == NO_HOLD:
                    engine.hold_from = seq
            pending.append((position, seq))
        return True

    @property
    def holding(self) -> bool:
        """Whether some persistent message waits for an fsync before it may be handed out."""
        return bool(self._holding)

    def stored(self, durable: int, *, healthy: bool = True) -> list[QueueEntity]:
        """An fsync covered every write up to store position `durable`: release what it held;
        returns the queues that may now hand out more (to dispatch). `healthy`: no write has
        failed since (an fsync in flight when a write failed covers only older writes)."""
        if healthy:
            self.failing = False
        released: list[QueueEntity] = []
        holding = self._holding
        for key, q in list(holding.items()):
            hold = q.queue.hold
            first = hold.pending[0][0]
            if first > durable:
                continue
            hold.release(durable)
            q.queue.hold_from = hold.first_checked()
            if not hold.pending:
                del holding[key]
            released.append(q)
        return released

    def unstored(self, after: int) -> list[QueueEntity]:
        """The writes after store position `after` failed (their publishes are refused):
        cancel them in the store and take them out of their queues; returns the queues."""
        self.failing = True
        touched: list[QueueEntity] = []
        for key, q in list(self._holding.items()):
            engine = q.queue
            gone = engine.hold.refuse(after)
            if not engine.hold.pending:
                del self._holding[key]
            if not gone:
                continue
            entry = self._by_entity.get(key)
            if entry is not None:
                entry[1].difference_update(gone)
                self.store.ack(entry[0], gone)
            engine.drop_refused(gone)
            touched.append(q)
        return touched

    def delivered(self, q: QueueEntity, seq: SeqId, delivery_count: int) -> None:
        """A persisted message was handed out with ack required."""
        entry = self._by_entity.get(id(q))
        if entry is not None:
            self.store.delivered(entry[0], seq, delivery_count)

    def acked(self, q: QueueEntity, seqs: Iterable[SeqId]) -> None:
        """Client acks of `q` (after `q.queue.ack(seqs)`)."""
        entry = self._by_entity.get(id(q))
        if entry is None or not entry[1]:
            return
        persisted = entry[1]
        done = [s for s in seqs if s in persisted]
        if done:
            persisted.difference_update(done)
            self.store.ack(entry[0], done)

    def purged(self, q: QueueEntity) -> None:
        """After `q.queue.purge()`: ack what the purge removed without telling `on_remove`
        (the paged tail is dropped wholesale). Survivors are the unacked and scheduled ones."""
        entry = self._by_entity.get(id(q))
        if entry is None or not entry[1]:
            return
        engine = q.queue
        alive = set(engine.unacked_seqs())
        alive.update(m.seq for m in engine.list_scheduled())
        gone = sorted(entry[1] - alive)
        if gone:
            entry[1].difference_update(gone)
            self.store.ack(entry[0], gone)

    def queue_deleted(self, q: QueueEntity) -> None:
        """A queue is gone: drop its messages from the store."""
        key = queue_key(q.vhost, q.name)
        self._by_entity.pop(id(q), None)
        self._holding.pop(id(q), None)
        if self._persisted.pop(key, None) is not None:
            self.store.drop_queue(key)
        q.queue.on_remove = None
        q.queue.on_delay = None

    # --- de-duplication window -------------------------------------------------------------

    def dedup_recorded(self, scope: str, message_id: str, at_ms: int) -> None:
        """A durable scope accepted `message_id` (written before the message it let through,
        so the same fsync covers both); the log is rewritten when it grew enough."""
        store = self.store
        store.dedup_record(scope, message_id, at_ms)
        if store.dedup_due():
            store.dedup_rewrite(self.registry.dedup.live())

    def dedup_discarded(self, scope: str, message_id: str) -> None:
        """A durable scope forgot `message_id` (the publish was refused)."""
        self.store.dedup_discard(scope, message_id)

    # --- delayed exchanges ------------------------------------------------------------------

    def held(self, vhost: str, x: Exchange, seq: int, msg: Message, due_ms: int) -> bool:
        """Delayed exchange `x` holds `msg` (its number `seq`) until `due_ms`: journal it when
        the exchange is durable and the message persistent. Returns True if written."""
        if not (x.durable and msg.persistent):
            return False
        key = delayed_key(vhost, x.name)
        self.store.enqueue(key, SeqId(seq), msg, expiry_ms=None, due_ms=due_ms)
        self._persisted.setdefault(key, set()).add(SeqId(seq))
        return True

    def released(self, vhost: str, x: Exchange, seqs: Iterable[int]) -> None:
        """Delayed exchange `x` routed its held messages `seqs`: ack the journaled ones."""
        key = delayed_key(vhost, x.name)
        persisted = self._persisted.get(key)
        if not persisted:
            return
        done = [SeqId(s) for s in seqs if s in persisted]
        if done:
            persisted.difference_update(done)
            self.store.ack(key, done)

    def track(self, key: str) -> set[SeqId]:
        """The persisted seqs of store key `key` (a queue's or a delayed exchange's), created
        empty on first use (recovery adds what it restores)."""
        return self._persisted.setdefault(key, set())

    def _drop_held(self, exchange_key: str) -> None:
        # An exchange definition was deleted: the messages it held (delayed) go with it.
        key = DELAYED_PREFIX + exchange_key
        if self._persisted.pop(key, None) is not None:
            self.store.drop_queue(key)

    # --- definitions (`defsync.py`) ---------------------------------------------------------

    def touch_binding(
        self,
        vhost: str,
        source: str,
        dest: tuple[str, str],
        routing_key: str,
        arguments: Mapping[str, Any] | None,
    ) -> None:
        """One binding was added or removed (bind/unbind): the next incremental sync writes it."""
        self.definitions.touch_binding(vhost, source, dest, routing_key, arguments)

    def touch(self, kind: str, vhost: str, name: str) -> None:
        """A durable queue or exchange (`QUEUE_DEF`/`EXCHANGE_DEF`) was created or deleted, or
        an exchange's bindings changed: the next incremental sync looks at it."""
        self.definitions.touch(kind, vhost, name)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Every durable definition of the broker, kind -> key -> JSON-able value (O(all))."""
        return self.definitions.snapshot()

    def sync_definitions(self, *, full: bool = True) -> int:
        """Write the definitions that changed; returns how many writes (`DefinitionSync.sync`:
        `full` diffs everything, else only what was touched since the last sync)."""
        return self.definitions.sync(full=full)

    # --- recovery (`recovery.py`) -----------------------------------------------------------

    def recover(self, now_ms: int, restore: Restorer, leases: LeaseRecovery) -> None:
        """Rebuild definitions and queue contents from the store (once, at construction):
        through `restore`'s steps into the owners, then the leases of `leases`."""
        state: RecoveredPort = self.store.recover()
        self.clean = state.clean
        b = self.registry
        defs = state.definitions
        restore_definitions(b, restore, defs, now_ms)
        # Millions of new long-lived objects: cyclic GC passes would rescan them all, again
        # and again, for nothing (the store's replay does the same).
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            self.recovered_messages += restore_messages(
                b, restore, self.store, state, self.track, now_ms
            )
        finally:
            if gc_was_enabled:
                gc.enable()
        # The de-duplication windows of durable scopes, trimmed, then stored again compacted.
        b.dedup.restore(getattr(state, "dedup", {}), b.vhosts, now_ms)
        self.store.dedup_rewrite(b.dedup.live())
        # Leases of the streams API last: they take their held messages back from the queues.
        leases.recover(defs.get(LEASE, {}), now_ms)
        self.definitions.load(defs)
        self.sync_definitions()  # config-created users, vhosts... and anything refused above
