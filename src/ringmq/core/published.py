"""What a publish did: the outcomes and the `Published` value every publish path returns.

Theory of operation
-------------------
The publish pipeline (core/publish.py) and its siblings return one `Published` per publish:
its outcome (accepted, buffered by a transaction, unroutable, or why a queue refused it) and
whether the message was persisted (its confirm then waits for the fsync). The adapters read the
outcome to settle a publish in their protocol's terms (AMQP 1.0's accepted / released /
rejected, a management publish's "routed"); a confirm channel's acks and nacks come from the
pipeline's confirm step, not from here.

There are twelve possible values and they are built once, here: the pipeline returns one of
`RESULTS` (or the named ones below), so a publish allocates no result. `Published` is frozen:
a value, never changed after it is made.

Pure: no state, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ringmq.core.entities import QueueEntity
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.transactions import STORE_FAILED

ACCEPTED: Final = "accepted"
"""Every queue the publish reached took it."""
BUFFERED: Final = "buffered"
"""A transaction holds the publish until its commit."""
UNROUTABLE: Final = "unroutable"
"""No queue took the publish (it was returned to a mandatory publisher)."""
OVERFLOW: Final = "overflow"
"""A queue's limit refused the message (RabbitMQ reject-publish, Qpid reject, a full ring)."""
ADDRESS_FULL: Final = "address-full"
"""An Artemis address-full-policy FAIL or BLOCK limit refused it."""

_NOT_REFUSED: Final = frozenset({ACCEPTED, BUFFERED, UNROUTABLE})


@dataclass(frozen=True, slots=True)
class Published:
    """What one publish did (`Publisher.publish` and its siblings): the whole result.

    The results are shared constants (`RESULTS`): a publish allocates none.
    """

    outcome: str
    """`ACCEPTED` (every queue reached took it; a confirm may still wait for the fsync),
    `BUFFERED` (a transaction holds it), `UNROUTABLE` (no queue), or why a queue refused it
    (`OVERFLOW`, `ADDRESS_FULL`, `STORE_FAILED`)."""
    stored: bool
    """It was persisted (journaled for a durable queue, or held durably by a delayed
    exchange): a confirm waits for the fsync that covers it."""

    @property
    def refused(self) -> str | None:
        """Why a queue refused it (`OVERFLOW`, `ADDRESS_FULL`, `STORE_FAILED`), else None."""
        return None if self.outcome in _NOT_REFUSED else self.outcome


RESULTS: Final = {
    (outcome, stored): Published(outcome, stored)
    for outcome in (ACCEPTED, BUFFERED, UNROUTABLE, OVERFLOW, ADDRESS_FULL, STORE_FAILED)
    for stored in (False, True)
}
"""Every `Published` there is, by (outcome, stored)."""
DONE: Final = RESULTS[ACCEPTED, False]
"""Accepted, nothing persisted."""
DONE_STORED: Final = RESULTS[ACCEPTED, True]
"""Accepted and persisted: a confirm waits for the fsync."""
HELD_BY_TX: Final = RESULTS[BUFFERED, False]
"""Buffered by a transaction."""
NO_ROUTE: Final = RESULTS[UNROUTABLE, False]
"""Unroutable."""


def address_full(q: QueueEntity) -> BrokerError:
    """Artemis address-full-policy FAIL: the producer's send fails."""
    return BrokerError(
        Condition.PRECONDITION_FAILED,
        f"queue {q.name!r} in vhost {q.vhost!r} is full (address-full-policy FAIL)",
    )
