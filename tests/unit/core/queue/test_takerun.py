"""`Queue.take_run` (takerun.py) against N single `fetch(ack_required=True)` calls.

Two identical queues get the same operations; one takes runs (directly, and through
`Reservations` over `EngineAdapter`, whose reserve hands the run over in one call), the other
takes one message at a time (a loop of `fetch` with the same byte rule, and `Reservations` over
a `ReservableQueue` that is not an `EngineAdapter`, so its reserve calls `take` per message).
After every step the queues' counters, unacked seqs and paged tails, the leases' contents, the
reads, settles and expiries must agree. The queues page past a small in-memory bound (by count
or by bytes), and carry plain, expiring, requeued (returns) and evicted messages, and bodies
paged one by one (flow-to-disk).
"""

from __future__ import annotations

from typing import Any, cast

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ringmq.core.message import Message, SeqId
from ringmq.core.queue import MemorySpillStore, Queue
from ringmq.core.queue.ports import RawRows
from ringmq.core.reservations import Reservations
from ringmq.core.reserveports import EngineAdapter, Taken
from ringmq.core.settings import resolve_queue_settings


class _OneByOne:
    """`ReservableQueue` over the engine that is not an `EngineAdapter` (per-message take)."""

    def __init__(self, q: Queue) -> None:
        self.q = q

    def take(self, now_ms: int) -> Taken[SeqId] | None:
        d = self.q.fetch(now_ms, ack_required=True)
        return None if d is None else Taken(d.seq, d.seq, d.message, d.redelivered)

    def ack(self, tags: list[SeqId], now_ms: int) -> None:
        self.q.ack(tags)

    def requeue(self, tags: list[SeqId], now_ms: int) -> None:
        self.q.requeue(tags, now_ms, count_failure=False)


def _fetch_each(
    q: Queue, n: int, max_bytes: int | None, now_ms: int
) -> list[tuple[SeqId, bytes, bool]]:
    # What `take_run` must equal: single fetches under the byte rule (the first always).
    out: list[tuple[SeqId, bytes, bool]] = []
    nbytes = 0
    while len(out) < n and (not out or max_bytes is None or nbytes < max_bytes):
        d = q.fetch(now_ms, ack_required=True)
        if d is None:
            break
        out.append((d.seq, d.message.body, d.redelivered))
        nbytes += len(d.message.body)
    return out


def _rows(entries: list[Any]) -> list[tuple[Any, ...]]:
    # Entries or deliveries without the message object (messages compare by identity).
    return [(*(getattr(e, f, None) for f in _FIELDS), e.message.body) for e in entries]


_FIELDS = ("pos", "seq", "redelivered", "tag", "delivery_count", "reason", "queue")


def _state(q: Queue) -> tuple[Any, ...]:
    return (q.stats(), q.unacked_seqs(), q.spilled, q.head_seq())


class TakeRunMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.run_q: Queue
        self.one_q: Queue

    @initialize(
        args=st.sampled_from(
            [
                {},
                {},
                {"x-max-length": 9},
                {"x-ring-size": 7},
                {"qpid.max_count": 5, "qpid.policy_type": "flow_to_disk"},  # bodies paged
            ]
        ),
        bound=st.sampled_from([(4, 1 << 20), (64, 24), (1 << 20, 1 << 30)]),
    )
    def setup(self, args: dict[str, Any], bound: tuple[int, int]) -> None:
        def make() -> Queue:
            q = Queue("q", resolve_queue_settings("q", args), spill=MemorySpillStore())
            q.set_memory_bound(*bound)
            return q

        self.run_q, self.one_q = make(), make()
        self.run_res: Reservations[SeqId] = Reservations(EngineAdapter(self.run_q))
        self.one_res: Reservations[SeqId] = Reservations(_OneByOne(self.one_q))
        self.other: list[SeqId] = []  # taken by another consumer, in both queues
        self.cursor = 0

    def _both(self) -> tuple[Queue, Queue]:
        return self.run_q, self.one_q

    @rule(
        n=st.integers(1, 12),
        size=st.integers(0, 9),
        ttl=st.sampled_from([None, None, None, None, 5, 50]),
    )
    def publish(self, n: int, size: int, ttl: int | None) -> None:
        for q in self._both():
            for i in range(n):
                body = bytes([i % 251]) * (size + i % 3)
                q.publish(Message("", "q", b"", body, expiration_ms=ttl), self.now)

    @rule(n=st.integers(0, 30), max_bytes=st.sampled_from([None, None, 0, 5, 17, 40]))
    def take(self, n: int, max_bytes: int | None) -> None:
        seqs: list[SeqId] = []
        msgs: list[Message | RawRows] = []
        flags: list[bool] = []
        k = self.run_q.take_run(n, max_bytes, self.now, seqs, msgs, flags)
        assert all(isinstance(m, Message) for m in msgs)  # a memory spill has no raw rows
        got = list(zip(seqs, [cast("Message", m).body for m in msgs], flags, strict=True))
        assert k == len(got)
        assert got == _fetch_each(self.one_q, n, max_bytes, self.now)
        self.other += seqs

    @precondition(lambda self: self.other)
    @rule(data=st.data(), requeue=st.booleans())
    def settle_other(self, data: st.DataObject, requeue: bool) -> None:
        # Another consumer acks or requeues some of what it took (requeued: the returns).
        chosen = data.draw(st.lists(st.sampled_from(self.other), unique=True, max_size=6))
        for q in self._both():
            if requeue:
                q.requeue(chosen, self.now)
            else:
                q.ack(chosen)
        self.other = [s for s in self.other if s not in chosen]

    @rule(n=st.integers(0, 25), max_bytes=st.sampled_from([None, None, 1, 12, 30]))
    def reserve(self, n: int, max_bytes: int | None) -> None:
        a = self.run_res.reserve("c", self.cursor, n, self.now, lease_ms=40, max_bytes=max_bytes)
        b = self.one_res.reserve("c", self.cursor, n, self.now, lease_ms=40, max_bytes=max_bytes)
        assert a == b
        self.cursor = a.end

    @rule(lo=st.integers(0, 80), span=st.integers(0, 40))
    def read(self, lo: int, span: int) -> None:
        a = self.run_res.read("c", lo, lo + span, self.now, renew=False)
        b = self.one_res.read("c", lo, lo + span, self.now, renew=False)
        assert _rows(a) == _rows(b)
        rows = self.run_res.read_rows("c", lo, lo + span, self.now, renew=False)
        assert rows == [(e.pos, e.seq, e.redelivered, e.message) for e in a]

    @rule(back=st.integers(0, 10))
    def settle(self, back: int) -> None:
        up = max(0, self.cursor - back)
        assert self.run_res.settle("c", up, self.now) == self.one_res.settle("c", up, self.now)

    @rule(ms=st.sampled_from([0, 1, 7, 30, 60]))
    def tick(self, ms: int) -> None:
        self.now += ms
        for q in self._both():
            q.tick(self.now)
        assert self.run_res.expire(self.now) == self.one_res.expire(self.now)

    @rule()
    def drop_lease(self) -> None:
        assert self.run_res.drop("c", self.now) == self.one_res.drop("c", self.now)

    @invariant()
    def agree(self) -> None:
        if not hasattr(self, "run_res"):
            return
        assert _state(self.run_q) == _state(self.one_q)
        a, b = self.run_res.lease("c"), self.one_res.lease("c")
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert _rows(a.entries) == _rows(b.entries)
            fields = ("settled", "next_pos", "skipped", "expired", "last_seq", "deadline_ms")
            assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
            assert a.tags == a.seqs
        assert _rows(self.run_q.drain_dead_letters()) == _rows(self.one_q.drain_dead_letters())

    def teardown(self) -> None:
        if hasattr(self, "run_res"):
            # In the end, the same messages wait in the same order.
            assert _rows(self.run_q.ready_view()) == _rows(self.one_q.ready_view())


TestTakeRun = TakeRunMachine.TestCase
# More examples than the dev profile's 50: a paging difference needs a run that crosses the
# read-ahead mark, and the machine is cheap (about 3 s).
TestTakeRun.settings = settings(TestTakeRun.settings, max_examples=200, stateful_step_count=50)
