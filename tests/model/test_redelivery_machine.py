"""Hypothesis state machines: Artemis delayed redelivery in the queue engine against a model,
in memory and over the journal with restarts.

The model is the rule as docs/configuration.md states it: a message that fails a delivery waits
`delay * multiplier ** (failures - 1)` ms (at most the maximum) off the queue, counted as
scheduled; when due it goes to the head, the messages due together in (due, seq) order, each in
front of the one before (a scheduled release); in a ring (`default-ring-size`) a message
returning to a full ring is itself deleted, as a scheduled message is (the ring-queue seed).
Publishing to a full ring evicts the head. A message given back without a failure returns to
its place at once: by seq among the messages not put at the head (RabbitMQ), or at the head in
a ring (Artemis). As the engine's lanes (`core/queue/lanes.py`), what was put at the head is
served before the rest. Each delivery carries the message's delivery count and redelivered
flag.

`DurableRedeliveryMachine` runs the same rules over a `FileStore` (the queue wired by
`Durability` as the broker wires a durable queue) and adds restarts, clean or a kill after a
sync. A restart brings back (docs/storage.md, "Recovery"): a message whose delay the journal
holds, and that was not delivered since (waiting, or released to the head and not yet taken),
scheduled again with its due time, so it goes back to the head when due; every other message
ready in seq order, unacknowledged ones included; delivery counts as they were; the
redelivered flag on every message after a kill, on those delivered before after a clean stop.
The failure count that makes the delay grow starts again.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ringmq.core.durability import Durability, queue_key
from ringmq.core.message import Message, SeqId
from ringmq.core.policies import AddressSettings
from ringmq.core.queue import Delivery, PublishOutcome, Queue
from ringmq.core.recovery import restore_recovered
from ringmq.core.settings import QueueSettings, resolve_queue_settings
from ringmq.storage import FileStore

if TYPE_CHECKING:
    from ringmq.core.entities import QueueEntity
    from ringmq.core.ports import Registry


@dataclass
class _Item:
    seq: int
    body: bytes
    failures: int = 0
    deliveries: int = 0
    redelivered: bool = False
    due: int | None = None  # the delay it waits for, or waited for and was not taken since


@dataclass
class _Model:
    delay: int
    multiplier: float
    max_delay: int | None
    ring: int | None
    head: list[_Item] = field(default_factory=list)  # put at the head, served first
    rest: list[_Item] = field(default_factory=list)  # by seq
    unacked: dict[int, _Item] = field(default_factory=dict)
    waiting: list[tuple[int, _Item]] = field(default_factory=list)  # (due, item)

    @property
    def ready(self) -> list[_Item]:
        return self.head + self.rest

    def wait_after(self, failures: int) -> int:
        cap = self.max_delay if self.max_delay is not None else self.delay * 10
        return int(min(self.delay * self.multiplier ** (failures - 1), cap))

    def _evict_head(self) -> None:
        if self.ring is not None and len(self.head) + len(self.rest) > self.ring:
            (self.head if self.head else self.rest).pop(0)

    def publish(self, item: _Item) -> None:
        self.rest.append(item)
        self._evict_head()

    def fetch(self) -> _Item | None:
        source = self.head if self.head else self.rest
        if not source:
            return None
        item = source.pop(0)
        item.deliveries += 1
        item.due = None
        self.unacked[item.seq] = item
        return item

    def fail(self, seq: int, now: int) -> None:
        item = self.unacked.pop(seq)
        item.failures += 1
        item.redelivered = True
        item.due = now + self.wait_after(item.failures)
        self.waiting.append((item.due, item))

    def release(self, seq: int) -> None:
        # Given back unfailed: in a ring to the head, else to its place by seq.
        item = self.unacked.pop(seq)
        item.redelivered = True
        if self.ring is not None:
            self.head.insert(0, item)
            self._evict_head()
            return
        at = next((i for i, r in enumerate(self.rest) if r.seq > seq), len(self.rest))
        self.rest.insert(at, item)

    def tick(self, now: int) -> None:
        due = sorted((d, it.seq, it) for d, it in self.waiting if d <= now)
        self.waiting = [(d, it) for d, it in self.waiting if d > now]
        for _, _, item in due:
            self.head.insert(0, item)
            self._evict_head()  # in a full ring: the returning message itself

    def restart(self, clean: bool) -> None:
        # What recovery puts back (module docstring); no limit applies to it.
        items = self.head + self.rest + list(self.unacked.values())
        items += [it for _, it in self.waiting]
        self.head, self.unacked = [], {}
        self.rest = sorted((it for it in items if it.due is None), key=lambda it: it.seq)
        self.waiting = [(it.due, it) for it in items if it.due is not None]
        for it in items:
            it.failures = 0
            it.redelivered = it.deliveries > 0 if clean else True


class RedeliveryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 10_000
        self.n = 0
        self.real: Queue
        self.model: _Model
        self.settings: QueueSettings

    # Where the durable machine writes to its store (nothing here).
    def _wire(self) -> None:
        pass

    def _published(self, msg: Message, outcome: PublishOutcome) -> None:
        pass

    def _fetched(self, got: Delivery) -> None:
        pass

    def _acked(self, seq: SeqId) -> None:
        pass

    @initialize(
        delay=st.integers(1, 50),
        multiplier=st.sampled_from([1.0, 1.5, 2.0, 3.0]),
        max_delay=st.sampled_from([None, 10, 60, 200]),
        ring=st.sampled_from([None, None, 1, 2, 3]),
    )
    def setup(self, delay: int, multiplier: float, max_delay: int | None, ring: int | None) -> None:
        values: dict[str, object] = {
            "redelivery-delay": delay,
            "redelivery-delay-multiplier": multiplier,
        }
        if max_delay is not None:
            values["max-redelivery-delay"] = max_delay
        if ring is not None:
            values["default-ring-size"] = ring
        self.settings = resolve_queue_settings(
            "q", {}, address_settings=AddressSettings.from_dict(values)
        )
        self.real = Queue("q", self.settings)
        self._wire()
        self.model = _Model(delay, multiplier, max_delay, ring)

    @rule()
    def publish(self) -> None:
        self.n += 1
        body = f"m{self.n}".encode()
        msg = Message("", "q", b"", body, persistent=True)
        outcome = self.real.publish(msg, self.now)
        self._published(msg, outcome)
        self.model.publish(_Item(self.real.last_seq, body))

    @rule()
    def fetch(self) -> None:
        got = self.real.fetch(self.now)
        want = self.model.fetch()
        assert (got and (got.message.body, got.redelivered, got.delivery_count)) == (
            want and (want.body, want.redelivered, want.deliveries)
        )
        if got is not None:
            self._fetched(got)

    @precondition(lambda self: bool(self.model.unacked))
    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(sorted(self.model.unacked)))
        self.real.requeue([SeqId(seq)], self.now)
        self.model.fail(seq, self.now)

    @precondition(lambda self: bool(self.model.unacked))
    @rule(data=st.data())
    def give_back(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(sorted(self.model.unacked)))
        self.real.requeue([SeqId(seq)], self.now, count_failure=False)
        self.model.release(seq)

    @precondition(lambda self: bool(self.model.unacked))
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(sorted(self.model.unacked)))
        self.real.ack([SeqId(seq)])
        self._acked(SeqId(seq))
        del self.model.unacked[seq]

    @rule(ms=st.integers(0, 120))
    def tick(self, ms: int) -> None:
        self.now += ms
        self.real.tick(self.now)
        self.model.tick(self.now)

    @invariant()
    def agree(self) -> None:
        if not hasattr(self, "model"):
            return
        ready = [m.body for m in self.real.ready_messages()]
        assert ready == [it.body for it in self.model.ready]
        assert self.real.counters.scheduled == len(self.model.waiting)
        assert self.real.next_deadline_ms() == min((d for d, _ in self.model.waiting), default=None)


TestRedelivery = RedeliveryMachine.TestCase

_KEY = queue_key("/", "q")
# What `Durability` reads of the broker's registry outside definitions: the confirm mode.
_REGISTRY = cast(
    "Registry", SimpleNamespace(config=SimpleNamespace(delay_persistent_confirms=False))
)


class DurableRedeliveryMachine(RedeliveryMachine):
    """The rules above over a journaled durable queue, with restarts (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="ringmq-redelivery-machine-"))
        self.store = FileStore.open(self.dir)
        self.store.recover()
        self.durability = Durability(self.store, _REGISTRY)
        self.entity: QueueEntity

    def teardown(self) -> None:
        self.store.abandon()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _wire(self) -> None:
        # The broker's durable queue as `Durability` sees it: its store key and its engine.
        self.entity = cast("QueueEntity", SimpleNamespace(vhost="/", name="q", queue=self.real))
        self.durability.attach(self.entity)

    def _published(self, msg: Message, outcome: PublishOutcome) -> None:
        self.durability.published(self.entity, msg, outcome, self.now)

    def _fetched(self, got: Delivery) -> None:
        self.durability.delivered(self.entity, got.seq, got.delivery_count)

    def _acked(self, seq: SeqId) -> None:
        self.durability.acked(self.entity, [seq])

    @rule(clean=st.booleans())
    def restart(self, clean: bool) -> None:
        if clean:
            self.store.close()
        else:
            self.store.sync()  # then killed: what reached the disk is all there is
            self.store.abandon()
        self.store = FileStore.open(self.dir)
        state = self.store.recover()
        assert state.clean == clean
        self.durability = Durability(self.store, _REGISTRY)
        self.real = Queue("q", self.settings)
        self._wire()
        restore_recovered(
            self.real, state.queues.get(_KEY, ()), None, self.durability.persisted(self.entity)
        )
        self.real.resume_seqs(state.next_seq.get(_KEY, 0))
        self.model.restart(clean)


TestDurableRedelivery = DurableRedeliveryMachine.TestCase
