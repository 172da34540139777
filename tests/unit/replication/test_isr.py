"""The ISR rules (replication/isr.py): who a confirm waits for, when a follower leaves or joins."""

from __future__ import annotations

from ringmq.replication.isr import IsrKeeper

TIMEOUT = 1000


def keeper() -> IsrKeeper:
    return IsrKeeper("a", frozenset({"a", "b", "c"}), TIMEOUT)


def test_a_confirm_waits_for_every_isr_follower_not_for_others() -> None:
    k = keeper()
    assert not k.covers(10, {"b": 10})  # c has not acknowledged
    assert k.covers(10, {"b": 10, "c": 12, "d": 0})  # d is not in the ISR
    assert k.counted() == {"b", "c"}  # the leader itself never waits for itself


def test_a_follower_holding_a_confirm_back_is_dropped_only_after_the_timeout() -> None:
    k = keeper()
    acked = {"b": 10, "c": 4}
    assert k.decide(0, acked, confirmed=4, waiting=10) is None  # c is late: noticed
    assert k.decide(TIMEOUT - 1, acked, confirmed=4, waiting=10) is None
    assert k.decide(TIMEOUT, acked, confirmed=4, waiting=10) == frozenset({"a", "b"})


def test_a_follower_leaves_the_isr_only_once_etcd_has_the_new_set() -> None:
    k = keeper()
    acked = {"b": 10}  # c is gone
    k.decide(0, acked, confirmed=4, waiting=10)
    assert k.decide(TIMEOUT, acked, confirmed=4, waiting=10) == frozenset({"a", "b"})
    # the write to etcd is under way: the confirm still waits for c
    assert not k.covers(10, acked)
    k.written(False)  # etcd did not take it: c still counts, and it is tried again
    assert not k.covers(10, acked)
    assert k.decide(TIMEOUT + 1, acked, confirmed=4, waiting=10) == frozenset({"a", "b"})
    k.written(True)
    assert k.isr == frozenset({"a", "b"})
    assert k.covers(10, acked)


def test_a_follower_that_catches_up_rejoins_and_counts_from_the_proposal_on() -> None:
    k = IsrKeeper("a", frozenset({"a", "b"}), TIMEOUT)
    assert k.decide(0, {"b": 20, "c": 9}, confirmed=10, waiting=None) is None  # c lacks 10
    assert k.decide(1, {"b": 20, "c": 10}, confirmed=10, waiting=None) == frozenset({"a", "b", "c"})
    # while etcd is written, a later confirm waits for c too (it will be an ISR member)
    assert not k.covers(15, {"b": 20, "c": 10})
    k.written(True)
    assert k.isr == frozenset({"a", "b", "c"})


def test_an_isr_follower_that_answers_in_time_stays() -> None:
    k = keeper()
    for t in range(0, 5 * TIMEOUT, 100):
        assert k.decide(t, {"b": t, "c": t}, confirmed=t, waiting=t) is None
    assert k.isr == frozenset({"a", "b", "c"})


def test_a_slow_follower_that_keeps_acknowledging_stays_and_a_stuck_one_is_dropped() -> None:
    k = keeper()
    # b releases each waiting confirm a little late (each within the timeout): it stays
    for t in range(0, 10 * TIMEOUT, TIMEOUT // 2):
        acked = {"b": t, "c": t + 1000}
        assert k.decide(t, acked, confirmed=t, waiting=t + 1) is None
    # c stops at 5000 while confirms wait for 5001, then later ones: dropped after the timeout
    k = keeper()
    for t in range(0, TIMEOUT, 100):
        assert k.decide(t, {"b": 6000 + t, "c": 5000}, confirmed=5000, waiting=5001 + t) is None
    assert k.decide(TIMEOUT, {"b": 7000, "c": 5000}, confirmed=5000, waiting=6000) == frozenset(
        {"a", "b"}
    )
