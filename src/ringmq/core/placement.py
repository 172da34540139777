"""Queue placement: which shard a new queue lives on (docs/dev/shards.md).

Theory of operation
-------------------
A broker runs as one or more *shards* (one process, one event loop, one log each). When a
queue is declared, `place` decides its shard from plain values only:

* the queue's leader locator (`x-queue-leader-locator`, or the `queue-leader-locator` policy:
  `ringmq.core.settings` resolves it, the legacy RabbitMQ values already read as `balanced`);
* the shard of the connection that declares it (for a declare with no connection, such as
  the management API or config loading, the shard that handles the call);
* the number of queues each shard holds now (`queues_per_shard`; its length is the number
  of shards);
* whether the queue is exclusive or auto-delete.

The rules, in order:

1. Exclusive and auto-delete queues are always client-local: they live and die with their
   connection (or its consumers), so they stay on its shard whatever the locator says.
2. `client-local` is the declaring connection's shard (RabbitMQ: the node the client is
   connected to), the default.
3. `balanced` is the shard holding the fewest queues, ties broken by the lowest shard index,
   so the decision is deterministic and repeatable (RabbitMQ picks a random node above 1,000
   queues to save counting; here the counts come with the call, so they are always used).

With one shard every rule answers shard 0. Invariants the tests check
(`tests/unit/core/test_placement.py`): the answer is always a valid shard index;
`client-local` always answers the connection's shard; any sequence of `balanced` placements
starting from equal counts keeps the counts within one of each other.

The decision is made once, at declare: a later policy change does not move a queue (as in
RabbitMQ, where the locator only applies when a queue is created); moving queues is a
rebalance's job. Pure: no state, no I/O, no clock; imports only the locator's enum.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import assert_never

from ringmq.core.argvalues import LeaderLocator

__all__ = ["place"]


def place(
    locator: LeaderLocator,
    *,
    connection_shard: int,
    queues_per_shard: Sequence[int],
    exclusive: bool = False,
    auto_delete: bool = False,
) -> int:
    """The shard a new queue goes to (see the module docstring for the rules).

    Args:
        locator: the queue's effective leader locator.
        connection_shard: the declaring connection's shard (or the shard handling the call).
        queues_per_shard: how many queues each shard holds, indexed by shard; its length is
            the number of shards (at least one).
        exclusive: the queue is exclusive to its connection.
        auto_delete: the queue is auto-delete.

    Returns:
        A shard index in `range(len(queues_per_shard))`.

    Raises:
        ValueError: no shards, or `connection_shard` is not one of them.
    """
    shards = len(queues_per_shard)
    if not 0 <= connection_shard < shards:
        raise ValueError(f"connection shard {connection_shard} not in 0..{shards - 1}")
    if exclusive or auto_delete:
        return connection_shard
    match locator:
        case LeaderLocator.CLIENT_LOCAL:
            return connection_shard
        case LeaderLocator.BALANCED:
            # min() returns the first of equal keys: the lowest index among the least loaded
            return min(range(shards), key=queues_per_shard.__getitem__)
        case _:
            assert_never(locator)
