"""Hypothesis state machine: Artemis delayed redelivery in the queue engine against a model.

The model is the rule as docs/configuration.md states it: a message that fails a delivery waits
`delay * multiplier ** (failures - 1)` ms (at most the maximum) off the queue, counted as
scheduled; when due it goes to the head, the messages due together in (due, seq) order, each in
front of the one before (a scheduled release); in a ring (`default-ring-size`) a message
returning to a full ring is itself deleted, as a scheduled message is (the ring-queue seed).
Publishing to a full ring evicts the head. A message given back without a failure returns to
its place at once: by seq among the messages not put at the head (RabbitMQ), or at the head in
a ring (Artemis). As the engine's lanes (`core/queue/lanes.py`), what was put at the head is
served before the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ringmq.core.message import Message, SeqId
from ringmq.core.policies import AddressSettings
from ringmq.core.queue import Queue
from ringmq.core.settings import resolve_queue_settings


@dataclass
class _Item:
    seq: int
    body: bytes
    failures: int = 0


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
        self.unacked[item.seq] = item
        return item

    def fail(self, seq: int, now: int) -> None:
        item = self.unacked.pop(seq)
        item.failures += 1
        self.waiting.append((now + self.wait_after(item.failures), item))

    def release(self, seq: int) -> None:
        # Given back unfailed: in a ring to the head, else to its place by seq.
        item = self.unacked.pop(seq)
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


class RedeliveryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 10_000
        self.n = 0
        self.real: Queue
        self.model: _Model

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
        settings = resolve_queue_settings(
            "q", {}, address_settings=AddressSettings.from_dict(values)
        )
        self.real = Queue("q", settings)
        self.model = _Model(delay, multiplier, max_delay, ring)

    @rule()
    def publish(self) -> None:
        self.n += 1
        body = f"m{self.n}".encode()
        self.real.publish(Message("", "q", b"", body), self.now)
        self.model.publish(_Item(self.n, body))

    @rule()
    def fetch(self) -> None:
        got = self.real.fetch(self.now)
        want = self.model.fetch()
        assert (got and got.message.body) == (want and want.body)
        if got is not None and want is not None:
            want.seq = got.seq  # the model keys unacked items by the engine's seq

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
