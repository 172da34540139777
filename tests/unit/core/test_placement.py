"""Queue placement (`core/placement.py`): the rules, and properties over any placements."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringmq.core.argvalues import LeaderLocator
from ringmq.core.placement import place

CLIENT_LOCAL = LeaderLocator.CLIENT_LOCAL
BALANCED = LeaderLocator.BALANCED


def test_client_local_is_the_connections_shard() -> None:
    assert place(CLIENT_LOCAL, connection_shard=2, queues_per_shard=[0, 0, 9, 0]) == 2


def test_balanced_is_the_shard_with_fewest_queues() -> None:
    assert place(BALANCED, connection_shard=0, queues_per_shard=[5, 3, 4]) == 1


def test_balanced_ties_go_to_the_lowest_shard() -> None:
    assert place(BALANCED, connection_shard=3, queues_per_shard=[4, 2, 2, 2]) == 1
    assert place(BALANCED, connection_shard=3, queues_per_shard=[0, 0, 0, 0]) == 0


@pytest.mark.parametrize(("exclusive", "auto_delete"), [(True, False), (False, True), (True, True)])
def test_exclusive_and_auto_delete_queues_follow_their_connection(
    exclusive: bool, auto_delete: bool
) -> None:
    got = place(
        BALANCED,
        connection_shard=1,
        queues_per_shard=[0, 7, 0],
        exclusive=exclusive,
        auto_delete=auto_delete,
    )
    assert got == 1


@pytest.mark.parametrize("locator", list(LeaderLocator))
def test_one_shard_places_everything_on_shard_0(locator: LeaderLocator) -> None:
    assert place(locator, connection_shard=0, queues_per_shard=[1234]) == 0
    assert place(locator, connection_shard=0, queues_per_shard=[0], exclusive=True) == 0


@pytest.mark.parametrize(("shard", "counts"), [(0, []), (-1, [0]), (2, [0, 0])])
def test_a_connection_shard_outside_the_shards_is_refused(shard: int, counts: list[int]) -> None:
    with pytest.raises(ValueError, match="connection shard"):
        place(CLIENT_LOCAL, connection_shard=shard, queues_per_shard=counts)


_COUNTS = st.lists(st.integers(0, 50), min_size=1, max_size=8)


@given(
    counts=_COUNTS,
    data=st.data(),
    locator=st.sampled_from(LeaderLocator),
    exclusive=st.booleans(),
    auto_delete=st.booleans(),
)
def test_the_answer_is_always_a_shard(
    counts: list[int],
    data: st.DataObject,
    locator: LeaderLocator,
    exclusive: bool,
    auto_delete: bool,
) -> None:
    conn = data.draw(st.integers(0, len(counts) - 1))
    got = place(
        locator,
        connection_shard=conn,
        queues_per_shard=counts,
        exclusive=exclusive,
        auto_delete=auto_delete,
    )
    assert 0 <= got < len(counts)
    if locator is CLIENT_LOCAL or exclusive or auto_delete:
        assert got == conn
    else:
        assert counts[got] == min(counts)
        assert all(c > counts[got] for c in counts[:got])  # the lowest of the least loaded


@given(
    shards=st.integers(1, 8),
    steps=st.lists(
        st.tuples(st.sampled_from(LeaderLocator), st.integers(0, 7), st.booleans()),
        max_size=60,
    ),
)
def test_balanced_placements_keep_shards_within_one_queue(
    shards: int, steps: list[tuple[LeaderLocator, int, bool]]
) -> None:
    # Balanced queues alone, from empty shards, never differ by more than one; with
    # client-local (or exclusive) queues mixed in, balanced ones never widen the gap.
    balanced_only = [0] * shards
    mixed = [0] * shards
    for locator, conn, exclusive in steps:
        conn %= shards
        spread = max(mixed) - min(mixed)
        got = place(locator, connection_shard=conn, queues_per_shard=mixed, exclusive=exclusive)
        mixed[got] += 1
        if locator is BALANCED and not exclusive:
            assert max(mixed) - min(mixed) <= max(spread, 1)
            balanced_only[
                place(BALANCED, connection_shard=conn, queues_per_shard=balanced_only)
            ] += 1
            assert max(balanced_only) - min(balanced_only) <= 1
        else:
            assert got == conn
