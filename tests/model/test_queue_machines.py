"""Hypothesis state machines: the queue engine against the naive model, one per family.

Every machine drives the real `Queue` and `ModelQueue` with the same rules (publish, fetch,
ack, requeue, reject, cancel, rollback, resize, tick, purge) and checks after every step that
outcomes, deliveries, ready order, unacked set, counters and dead letters agree.
"""

from __future__ import annotations

from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ringmq.core.message import Message, SeqId
from ringmq.core.queue import Queue
from ringmq.core.settings import resolve_queue_settings
from tests.model.queue_model import ModelConfig, ModelQueue

KEYS = st.sampled_from(["a", "b", "c", None])


class QueueMachine(RuleBasedStateMachine):
    """Base machine; subclasses choose the settings family and which rules make sense."""

    scheduling: ClassVar[bool] = False
    ttl_rules: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000
        self.n = 0
        self.real: Queue
        self.model: ModelQueue
        self.args: dict[str, Any] = {}

    # Subclasses call this from their @initialize rule.
    def setup(self, args: dict[str, Any], cfg: ModelConfig) -> None:
        self.args = args
        self.real = Queue("q", resolve_queue_settings("q", args))
        self.model = ModelQueue(cfg)

    def _message(self, size: int, key: Any, delay: int, ttl: int | None) -> tuple[Message, bytes]:
        self.n += 1
        body = f"{self.n}:".encode() + b"x" * size
        headers: dict[str, Any] = {}
        if key is not None:
            headers["k"] = key
        if delay:
            headers["x-delay"] = delay
        msg = Message("", "q", b"", body, headers=headers or None, expiration_ms=ttl)
        return msg, body

    def do_publish(
        self, size: int, key: Any, delay: int, ttl: int | None, priority: int = 0
    ) -> None:
        msg, body = self._message(size, key, delay, ttl)
        msg.priority = priority
        got = self.real.publish(msg, self.now)
        want = self.model.publish(body, key, delay, ttl, self.now, priority)
        assert got.value == want

    @rule(size=st.integers(0, 4), key=KEYS)
    def publish(self, size: int, key: Any) -> None:
        self.do_publish(size, key, 0, None)

    @rule(ack_required=st.sampled_from([True, True, True, False]))
    def fetch(self, ack_required: bool) -> None:
        self.do_fetch(ack_required)

    @rule(n=st.integers(2, 4))
    def consume(self, n: int) -> None:
        """A consumer with prefetch n takes up to n messages."""
        for _ in range(n):
            self.do_fetch(True)

    def do_fetch(self, ack_required: bool) -> None:
        got = self.real.fetch(self.now, ack_required)
        want = self.model.fetch(self.now, ack_required)
        assert (
            None
            if got is None
            else (got.seq, got.message.body, got.redelivered, got.delivery_count)
        ) == (want)

    def _pick(self, data: st.DataObject, min_size: int = 1) -> list[int]:
        unacked = list(self.model.unacked)
        if not unacked:
            return []
        picked = data.draw(st.lists(st.sampled_from(unacked), min_size=min_size, unique=True))
        order = {s: i for i, s in enumerate(unacked)}
        return sorted(picked, key=order.__getitem__)  # consumption order

    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        seqs = self._pick(data)
        self.real.ack(SeqId(s) for s in seqs)
        self.model.ack(seqs)

    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        seqs = self._pick(data)
        self.real.requeue([SeqId(s) for s in seqs], self.now)
        self.model.requeue(seqs)

    @rule(data=st.data())
    def reject(self, data: st.DataObject) -> None:
        seqs = self._pick(data)
        self.real.reject((SeqId(s) for s in seqs), self.now)
        self.model.reject(seqs)

    @rule()
    def cancel(self) -> None:
        """A consumer (or channel) closes: all its unacked messages come back."""
        seqs = list(self.model.unacked)
        self.real.requeue([SeqId(s) for s in seqs], self.now)
        self.model.requeue(seqs)

    @rule(data=st.data())
    def rollback(self, data: st.DataObject) -> None:
        """A transaction rolls back: its messages return without counting a failed delivery."""
        seqs = self._pick(data, min_size=0)
        self.real.requeue([SeqId(s) for s in seqs], self.now, count_failure=False)
        self.model.requeue(seqs, count_failure=False)

    @rule(ms=st.sampled_from([0, 1, 5, 50]))
    def tick(self, ms: int) -> None:
        self.now += ms
        self.real.tick(self.now)
        self.model.tick(self.now)

    @rule()
    def drop_expired(self) -> None:
        """What the broker runs after a dispatch and after a basic.get."""
        self.real.drop_expired(self.now)
        self.model.drop_expired(self.now)

    @rule()
    def purge(self) -> None:
        assert self.real.purge() == self.model.purge()

    @invariant()
    def agree(self) -> None:
        if not hasattr(self, "real"):
            return
        real, model = self.real, self.model
        want = model.snapshot()
        ready = [(e.seq, e.message.body, e.redelivered) for e in real.ready_view()]
        c = real.counters
        got = {
            "ready": ready,
            "unacked": sorted(real.unacked_seqs()),
            "scheduled": sorted(s.seq for s in real.list_scheduled()),
            "ready_bytes": c.ready_bytes + c.paged_bytes,
            "ring_evicted": c.ring_evicted,
            "lvq_replaced": c.lvq_replaced,
            "overflow_rejected": c.overflow_rejected,
            "expired": c.expired,
            "maxlen_dropped": c.maxlen_dropped,
            "acknowledged": c.acknowledged,
        }
        assert got == want
        assert real.ready_count == len(model.ready)
        assert real.unacked_count == len(model.unacked)
        assert c.scheduled == len(model.scheduled)
        assert real.message_count == len(model.ready) + len(model.unacked) + len(model.scheduled)
        dead = [(d.message.body, d.reason.value) for d in real.drain_dead_letters()]
        assert dead == model.dead
        model.dead.clear()


class RingMachine(QueueMachine):
    """Artemis ring queues, with runtime resizing."""

    @initialize(size=st.integers(0, 4))
    def init(self, size: int) -> None:
        self.setup({"x-ring-size": size}, ModelConfig(action="ring", max_count=size))

    @rule(size=st.integers(0, 5))
    def resize(self, size: int) -> None:
        self.real.update_settings(resolve_queue_settings("q", {"x-ring-size": size}), self.now)
        self.model.resize(size)

    @rule(size=st.integers(0, 4), delay=st.sampled_from([1, 5, 50]))
    def publish_scheduled(self, size: int, delay: int) -> None:
        self.do_publish(size, None, delay, None)


class DropHeadMachine(QueueMachine):
    """RabbitMQ max-length / max-length-bytes with drop-head and a DLX; lowered live."""

    @initialize(count=st.none() | st.integers(0, 4), nbytes=st.none() | st.integers(0, 12))
    def init(self, count: int | None, nbytes: int | None) -> None:
        args: dict[str, Any] = {"x-dead-letter-exchange": "dlx"}
        if count is not None:
            args["x-max-length"] = count
        if nbytes is not None:
            args["x-max-length-bytes"] = nbytes
        self.setup(
            args, ModelConfig(action="drop-head", max_count=count, max_bytes=nbytes, dlx=True)
        )
        if count is None and nbytes is None:
            self.model.cfg.action = None

    @precondition(lambda self: "x-max-length" in self.args)
    @rule(size=st.integers(0, 5))
    def resize(self, size: int) -> None:
        self.args["x-max-length"] = size
        self.real.update_settings(resolve_queue_settings("q", self.args), self.now)
        self.model.resize(size)


class RejectPublishMachine(QueueMachine):
    """RabbitMQ reject-publish and reject-publish-dlx."""

    @initialize(
        count=st.integers(0, 4),
        nbytes=st.none() | st.integers(0, 12),
        overflow=st.sampled_from(["reject-publish", "reject-publish-dlx"]),
    )
    def init(self, count: int, nbytes: int | None, overflow: str) -> None:
        args: dict[str, Any] = {
            "x-max-length": count,
            "x-overflow": overflow,
            "x-dead-letter-exchange": "dlx",
        }
        if nbytes is not None:
            args["x-max-length-bytes"] = nbytes
        self.setup(args, ModelConfig(action=overflow, max_count=count, max_bytes=nbytes, dlx=True))

    @rule(size=st.integers(0, 5))
    def resize(self, size: int) -> None:
        self.args["x-max-length"] = size
        self.real.update_settings(resolve_queue_settings("q", self.args), self.now)
        self.model.resize(size)


class QpidMachine(QueueMachine):
    """Qpid legacy reject / ring / ring_strict / flow_to_disk by count and bytes (acquired
    messages count)."""

    @initialize(
        count=st.none() | st.integers(1, 4),
        nbytes=st.none() | st.integers(1, 12),
        policy=st.sampled_from(["reject", "ring", "ring_strict", "flow_to_disk"]),
    )
    def init(self, count: int | None, nbytes: int | None, policy: str) -> None:
        if count is None and nbytes is None:
            count = 3
        args: dict[str, Any] = {"qpid.policy_type": policy, "x-dead-letter-exchange": "alt"}
        if count is not None:
            args["qpid.max_count"] = count
        if nbytes is not None:
            args["qpid.max_size"] = nbytes
        action = {
            "reject": "qpid-reject",
            "ring": "qpid-ring",
            "ring_strict": "qpid-ring-strict",
            "flow_to_disk": "qpid-flow-to-disk",  # never refuses; pages bodies out
        }
        cfg = ModelConfig(action=action[policy], max_count=count, max_bytes=nbytes, dlx=True)
        self.setup(args, cfg)


class LastValueMachine(QueueMachine):
    """Last-value queues (Artemis / Qpid key), optionally combined with a ring."""

    @initialize(ring=st.none() | st.integers(1, 4))
    def init(self, ring: int | None) -> None:
        args: dict[str, Any] = {"x-last-value-key": "k"}
        cfg = ModelConfig(lvq=True)
        if ring is not None:
            args["x-ring-size"] = ring
            cfg.action, cfg.max_count = "ring", ring
        self.setup(args, cfg)

    @precondition(lambda self: "x-ring-size" in self.args)
    @rule(size=st.integers(0, 5))
    def resize(self, size: int) -> None:
        self.args["x-ring-size"] = size
        self.real.update_settings(resolve_queue_settings("q", self.args), self.now)
        self.model.resize(size)


class ScheduledTtlDlxMachine(QueueMachine):
    """Scheduled delivery, queue and message TTL, dead-lettering and the delivery limit."""

    @initialize(
        ttl=st.none() | st.sampled_from([0, 5, 40]),
        limit=st.none() | st.integers(0, 2),
        drop_head=st.none() | st.integers(1, 4),
    )
    def init(self, ttl: int | None, limit: int | None, drop_head: int | None) -> None:
        args: dict[str, Any] = {"x-dead-letter-exchange": "dlx"}
        cfg = ModelConfig(dlx=True, ttl=ttl, delivery_limit=limit)
        if ttl is not None:
            args["x-message-ttl"] = ttl
        if limit is not None:
            args["x-delivery-limit"] = limit
        if drop_head is not None:
            args["x-max-length"] = drop_head
            cfg.action, cfg.max_count = "drop-head", drop_head
        self.setup(args, cfg)

    @rule(
        size=st.integers(0, 3),
        delay=st.sampled_from([1, 5, 50]),
        ttl=st.none() | st.sampled_from([0, 3, 30]),
    )
    def publish_scheduled(self, size: int, delay: int, ttl: int | None) -> None:
        self.do_publish(size, None, delay, ttl)

    @rule(size=st.integers(0, 3), ttl=st.sampled_from([0, 3, 30]))
    def publish_with_ttl(self, size: int, ttl: int) -> None:
        self.do_publish(size, None, 0, ttl)

    @precondition(lambda self: "x-max-length" in self.args)
    @rule(size=st.integers(0, 5))
    def resize(self, size: int) -> None:
        self.args["x-max-length"] = size
        self.real.update_settings(resolve_queue_settings("q", self.args), self.now)
        self.model.resize(size)


class PriorityMachine(QueueMachine):
    """x-max-priority with no limit, a ring, drop-head or a Qpid ring (lowest-priority oldest
    evicted first)."""

    @initialize(
        levels=st.integers(1, 3),
        family=st.sampled_from(["none", "ring", "drop-head", "qpid-ring"]),
        bound=st.integers(1, 4),
        ttl=st.none() | st.sampled_from([5, 40]),
    )
    def init(self, levels: int, family: str, bound: int, ttl: int | None) -> None:
        args: dict[str, Any] = {"x-max-priority": levels, "x-dead-letter-exchange": "dlx"}
        cfg = ModelConfig(max_priority=levels, dlx=True, ttl=ttl)
        if ttl is not None:
            args["x-message-ttl"] = ttl
        if family == "ring":
            args["x-ring-size"] = bound
            cfg.action, cfg.max_count = "ring", bound
        elif family == "drop-head":
            args["x-max-length"] = bound
            cfg.action, cfg.max_count = "drop-head", bound
        elif family == "qpid-ring":
            args["qpid.max_count"] = bound
            args["qpid.policy_type"] = "ring"
            cfg.action, cfg.max_count = "qpid-ring", bound
        self.setup(args, cfg)

    @rule(size=st.integers(0, 3), priority=st.integers(0, 5))
    def publish_priority(self, size: int, priority: int) -> None:
        self.do_publish(size, None, 0, None, priority)

    @rule(priority=st.integers(0, 5), delay=st.sampled_from([1, 5]))
    def publish_priority_scheduled(self, priority: int, delay: int) -> None:
        self.do_publish(1, None, delay, None, priority)


TestRing = RingMachine.TestCase
TestDropHead = DropHeadMachine.TestCase
TestRejectPublish = RejectPublishMachine.TestCase
TestQpid = QpidMachine.TestCase
TestLastValue = LastValueMachine.TestCase
TestScheduledTtlDlx = ScheduledTtlDlxMachine.TestCase
TestPriority = PriorityMachine.TestCase
