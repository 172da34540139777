"""Reservations and de-duplication (core/reservations.py) against a seq-ordered queue.

`SeqQueue` is a minimal reference backing queue (ready messages kept in seq order, requeue
restores the original position): the behaviour STYLE.md §4 fixes for the real engine. The
engine-backed tests live in test_reservations_engine.py.
"""

from __future__ import annotations

import bisect

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ringmq.core.dedup import Deduplicator
from ringmq.core.message import Message, SeqId
from ringmq.core.reservations import Reservations
from ringmq.core.reserveports import Taken


def _msg(body: bytes) -> Message:
    return Message(exchange="", routing_key="q", properties_bin=b"\x00\x00", body=body)


class SeqQueue:
    """Ready list sorted by seq; taken messages held by tag; requeue restores position."""

    def __init__(self, ring: int | None = None) -> None:
        self.ring = ring
        self.next_seq = 0
        self.ready: list[tuple[int, Message, bool]] = []
        self.unacked: dict[int, tuple[int, Message]] = {}
        self.acked: list[int] = []
        self.evicted = 0
        self._tag = 0

    def publish(self, body: bytes) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self.ready.append((seq, _msg(body), False))
        if self.ring is not None and len(self.ready) > self.ring:
            self.ready.pop(0)
            self.evicted += 1
        return seq

    def take(self, now_ms: int) -> Taken[int] | None:
        if not self.ready:
            return None
        seq, msg, red = self.ready.pop(0)
        self._tag += 1
        self.unacked[self._tag] = (seq, msg)
        return Taken(self._tag, SeqId(seq), msg, red)

    def ack(self, tags: list[int], now_ms: int) -> None:
        for t in tags:
            seq, _ = self.unacked.pop(t)
            self.acked.append(seq)

    def requeue(self, tags: list[int], now_ms: int) -> None:
        for t in tags:
            seq, msg = self.unacked.pop(t)
            bisect.insort(self.ready, (seq, msg, True), key=lambda r: r[0])


def test_reserve_read_settle_cycle() -> None:
    q = SeqQueue()
    for i in range(10):
        q.publish(b"m%d" % i)
    res = Reservations(q)
    r = res.reserve("spark", 0, 4, now_ms=0)
    assert (r.start, r.end) == (0, 4)
    assert len(q.ready) == 6
    assert len(q.unacked) == 4
    # reads are repeatable and change nothing
    a = res.read("spark", 0, 4, now_ms=1)
    b = res.read("spark", 1, 3, now_ms=2)
    assert [e.message.body for e in a] == [b"m0", b"m1", b"m2", b"m3"]
    assert [e.pos for e in b] == [1, 2]
    assert [e.seq for e in a] == [0, 1, 2, 3]
    # a second reserve of the same range keeps the same messages
    again = res.reserve("spark", 0, 4, now_ms=3)
    assert (again.start, again.end) == (0, 4)
    assert len(q.unacked) == 4
    # next batch
    r2 = res.reserve("spark", 4, 100, now_ms=4)
    assert (r2.start, r2.end) == (4, 10)
    assert res.settle("spark", 4, now_ms=5) == 4
    assert res.settle("spark", 4, now_ms=5) == 0  # idempotent
    assert res.settle("spark", 2, now_ms=5) == 0  # cumulative: never goes back
    assert sorted(q.acked) == [0, 1, 2, 3]
    assert res.read("spark", 0, 4, now_ms=6) == []
    assert len(res.read("spark", 4, 10, now_ms=6)) == 6


def test_idle_reserve_returns_start() -> None:
    q = SeqQueue()
    res = Reservations(q)
    r = res.reserve("c", 0, 10, now_ms=0)
    assert (r.start, r.end) == (0, 0)
    q.publish(b"x")
    assert res.reserve("c", 0, 10, now_ms=1).end == 1


def test_lease_expiry_returns_messages_to_head_and_replay_refills() -> None:
    q = SeqQueue()
    for i in range(5):
        q.publish(b"%d" % i)
    res = Reservations(q)
    res.reserve("c", 0, 3, now_ms=0, lease_ms=100)
    assert res.next_deadline_ms() == 100
    assert res.expire(99) == []
    res.read("c", 0, 3, now_ms=50)  # reading renews
    assert res.expire(149) == []
    assert res.expire(150) == ["c"]
    # back at the head, in order, redelivered, for anyone
    assert [(s, red) for s, _, red in q.ready] == [
        (0, True),
        (1, True),
        (2, True),
        (3, False),
        (4, False),
    ]
    lease = res.lease("c")
    assert lease is not None
    assert (lease.settled, lease.next_pos, lease.expired) == (0, 0, 1)
    # a restarted reader replaying [0, 3) gets the range refilled from the head
    r = res.reserve("c", 0, 3, now_ms=200)
    assert (r.start, r.end) == (0, 3)
    got = res.read("c", 0, 3, now_ms=200)
    assert [(e.seq, e.redelivered) for e in got] == [(0, True), (1, True), (2, True)]


def test_other_consumer_takes_expired_messages_then_replay_is_shorter() -> None:
    q = SeqQueue()
    for i in range(4):
        q.publish(b"%d" % i)
    res = Reservations(q)
    res.reserve("c", 0, 4, now_ms=0, lease_ms=10)
    res.expire(10)
    stolen = q.take(11)
    assert stolen is not None
    assert stolen.seq == 0
    r = res.reserve("c", 0, 4, now_ms=12)
    assert r.end == 3
    # the reader had planned [0, 4): asking from 4 never reserves below 4
    q.publish(b"new")
    r2 = res.reserve("c", 4, 10, now_ms=13)
    assert (r2.start, r2.end) == (4, 5)
    assert [e.pos for e in res.read("c", 0, 10, now_ms=14)] == [0, 1, 2, 4]


def test_start_below_settled_is_raised() -> None:
    q = SeqQueue()
    for i in range(6):
        q.publish(b"%d" % i)
    res = Reservations(q)
    res.reserve("c", 0, 6, now_ms=0)
    res.settle("c", 3, now_ms=0)
    r = res.reserve("c", 1, 2, now_ms=0)
    assert (r.start, r.end) == (3, 5)


def test_max_bytes_takes_at_least_one() -> None:
    q = SeqQueue()
    for _ in range(5):
        q.publish(b"x" * 100)
    res = Reservations(q)
    assert res.reserve("c", 0, 10, now_ms=0, max_bytes=10).end == 1
    assert res.reserve("c", 1, 10, now_ms=0, max_bytes=250).end == 4


def test_ring_evictions_are_counted_as_skipped() -> None:
    q = SeqQueue(ring=3)
    for i in range(3):
        q.publish(b"%d" % i)
    res = Reservations(q)
    res.reserve("c", 0, 1, now_ms=0)  # seq 0 held: a ring counts pending only
    for i in range(3, 8):
        q.publish(b"%d" % i)
    assert q.evicted == 4  # seqs 1..4 evicted: the ring keeps 3 ready
    r = res.reserve("c", 1, 10, now_ms=0)
    assert r.skipped == 4
    assert [e.seq for e in res.read("c", 0, 10, now_ms=0)] == [0, 5, 6, 7]


def test_two_consumers_are_independent_and_drop_returns() -> None:
    q = SeqQueue()
    for i in range(4):
        q.publish(b"%d" % i)
    res = Reservations(q)
    res.reserve("a", 0, 2, now_ms=0)
    res.reserve("b", 0, 2, now_ms=0)
    assert [e.seq for e in res.read("a", 0, 2, now_ms=0)] == [0, 1]
    assert [e.seq for e in res.read("b", 0, 2, now_ms=0)] == [2, 3]
    assert res.held == 4
    assert res.drop("a", now_ms=0)
    assert not res.drop("a", now_ms=0)
    assert [s for s, _, _ in q.ready] == [0, 1]
    res.release_all(now_ms=0)
    assert len(q.ready) == 4
    assert res.leases() == []


def test_argument_validation() -> None:
    res = Reservations(SeqQueue())
    with pytest.raises(ValueError, match="max_messages"):
        res.reserve("c", 0, -1, now_ms=0)
    with pytest.raises(ValueError, match="lease_ms"):
        res.reserve("c", 0, 1, now_ms=0, lease_ms=0)
    assert res.read("nobody", 0, 10, now_ms=0) == []
    assert res.settle("nobody", 10, now_ms=0) == 0
    assert not res.renew("nobody", now_ms=0)


class ReservationMachine(RuleBasedStateMachine):
    """No message is lost or duplicated; reads of a held range are stable."""

    def __init__(self) -> None:
        super().__init__()
        self.q = SeqQueue()
        self.res: Reservations[int] = Reservations(self.q)
        self.now = 0
        self.published: set[int] = set()
        self.cursor = 0  # the reader's committed/planned position
        self.snapshots: dict[tuple[int, int], list[int]] = {}

    @rule(n=st.integers(1, 5))
    def publish(self, n: int) -> None:
        for _ in range(n):
            self.published.add(self.q.publish(b"b"))

    @rule(n=st.integers(0, 6))
    def reserve(self, n: int) -> None:
        r = self.res.reserve("c", self.cursor, n, self.now, lease_ms=50)
        assert r.end - r.start <= n
        held = [int(e.seq) for e in self.res.read("c", r.start, r.end, self.now, renew=False)]
        self.snapshots[(r.start, r.end)] = held
        self.cursor = r.end

    @precondition(lambda self: self.cursor > 0)
    @rule(data=st.data())
    def settle(self, data: st.DataObject) -> None:
        up = data.draw(st.integers(0, self.cursor))
        self.res.settle("c", up, self.now)
        self.snapshots = {k: v for k, v in self.snapshots.items() if k[0] >= up}

    @rule(ms=st.integers(0, 60))
    def tick(self, ms: int) -> None:
        self.now += ms
        if self.res.expire(self.now):
            self.snapshots.clear()

    @rule()
    def other_consumer(self) -> None:
        got = self.q.take(self.now)
        if got is not None:
            self.q.ack([got.tag], self.now)

    @invariant()
    def conserved(self) -> None:
        held = [e.seq for e in self.res.read("c", 0, 10**9, self.now, renew=False)]
        ready = [s for s, _, _ in self.q.ready]
        everything = held + ready + self.q.acked
        assert sorted(everything) == sorted(self.published)
        assert len(self.q.unacked) == len(held)

    @invariant()
    def stable_reads(self) -> None:
        for (lo, hi), want in self.snapshots.items():
            assert [e.seq for e in self.res.read("c", lo, hi, self.now, renew=False)] == want

    @invariant()
    def lease_shape(self) -> None:
        lease = self.res.lease("c")
        if lease is not None:
            assert lease.settled <= lease.next_pos
            assert all(lease.settled <= p < lease.next_pos for p in lease.positions)
            assert lease.positions == sorted(lease.positions)


TestReservationMachine = ReservationMachine.TestCase


def test_dedup_window_and_count() -> None:
    d: Deduplicator[str] = Deduplicator(window_ms=100, max_ids=3)
    assert not d.seen("q", "a", 0)
    d.record("q", "a", 0)
    assert d.seen("q", "a", 50)
    assert not d.seen("other", "a", 50)
    assert not d.seen("q", "a", 100)  # window passed
    for i, mid in enumerate(["b", "c", "d", "e"]):
        d.record("q", mid, 200 + i)
    assert d.size("q") == 3
    assert not d.seen("q", "b", 210)  # pushed out by count
    assert d.seen("q", "e", 210)
    assert d.duplicates == 2
    d.forget("q")
    assert d.size("q") == 0
    with pytest.raises(ValueError, match="must be > 0"):
        Deduplicator(window_ms=0)


class _Named:
    def __init__(self, name: str, arguments: dict[str, object]) -> None:
        self.name = name
        self.arguments = arguments


def test_publish_dedup_scopes_and_refusal() -> None:
    from ringmq.core.dedup import DEDUP_WINDOW_ARG, PublishDedup

    d = PublishDedup()
    x = _Named("x", {})
    dq = _Named("dq", {DEDUP_WINDOW_ARG: 100})
    pq = _Named("pq", {})
    assert d.admit("/", x, [pq, dq], "m1", 0) == [pq, dq]
    assert d.admit("/", x, [pq, dq], "m1", 10) == [pq]  # only the dedup queue skips it
    assert d.admit("/", x, [dq, pq], "m1", 200) == [dq, pq]  # window passed
    d.refused("/", x, dq, "m1")  # dq refused it (overflow): a retry must pass
    assert d.admit("/", x, [dq], "m1", 201) == [dq]
    dx = _Named("dx", {DEDUP_WINDOW_ARG: 50})
    assert d.admit("/", dx, [pq], "m2", 0) == [pq]
    assert d.admit("/", dx, [pq], "m2", 1) == ()
    assert d.admit("/", dx, [pq], "m2", 60) == [pq]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),  # scope
            st.integers(0, 6),  # message id
            st.integers(0, 40),  # time step
            st.sampled_from([10, 25]),  # window
        ),
        max_size=60,
    )
)
def test_check_and_record_matches_seen_then_record(
    ops: list[tuple[str, int, int, int]],
) -> None:
    # The publish path's one-step call must answer as `seen` followed by `record` does.
    fast: Deduplicator[str] = Deduplicator(window_ms=10, max_ids=4)
    slow: Deduplicator[str] = Deduplicator(window_ms=10, max_ids=4)
    now = 0
    for scope, mid, step, window in ops:
        now += step // 8  # often the same ms (one read batch), sometimes later
        dup = slow.seen(scope, str(mid), now)
        if not dup:
            slow.record(scope, str(mid), now, window_ms=window)
        assert fast.check_and_record(scope, str(mid), now, window) == dup
        assert fast.duplicates == slow.duplicates
        assert fast.size(scope) <= 4


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),  # scope
            st.lists(st.one_of(st.none(), st.integers(0, 6)), max_size=8),  # a run's ids
            st.integers(0, 40),  # time step
            st.sampled_from([10, 25]),  # window
        ),
        max_size=30,
    )
)
def test_admit_many_is_check_and_record_in_turn(
    runs: list[tuple[str, list[int | None], int, int]],
) -> None:
    # A run's ids at one now_ms answer as one `check_and_record` each, in order (None: no
    # id, always admitted, nothing recorded).
    many: Deduplicator[str] = Deduplicator(window_ms=10, max_ids=4)
    one: Deduplicator[str] = Deduplicator(window_ms=10, max_ids=4)
    now = 0
    for scope, mids, step, window in runs:
        now += step // 8
        ids = [None if m is None else str(m) for m in mids]
        want = [m is None or not one.check_and_record(scope, m, now, window) for m in ids]
        assert many.admit_many(scope, ids, now, window) == want
        assert many.duplicates == one.duplicates
        many.seen(scope, "-", now)  # both trimmed alike: an empty run trims, no call does not
        one.seen(scope, "-", now)
        assert list(dict(many.scopes()).get(scope, {}).items()) == list(
            dict(one.scopes()).get(scope, {}).items()
        )


def test_fast_entry_is_an_ordinary_frozen_entry() -> None:
    import dataclasses

    from ringmq.core.reservations import Entry, _new_entry

    m = _msg(b"x")
    fast = _new_entry(3, SeqId(7), m, True, 11)
    assert fast == Entry(3, SeqId(7), m, True, 11)
    assert hash(fast) == hash(Entry(3, SeqId(7), m, True, 11))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.pos = 4  # type: ignore[misc]
