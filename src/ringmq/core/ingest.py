"""Bulk ingest: a run of publishes that all go to the same place, routed and enqueued once.

Theory of operation
-------------------
`publish_batch` (core/publishbatch.py: the streams API's bulk publish, a Spark sink's write)
hands runs of its messages to `ingest_run`, which is the publish pipeline (`core/publish.py`)
done for many messages at once where nothing in the run can make one message's path differ
from another's. A guard in front decides; when it says no, the caller publishes the run one
message at a time through the per-message pipeline, so every rule (routing, alternate
exchanges, limits, flow, durability, confirms) has exactly one implementation and the bulk
step only skips repeating it. The guard takes a run when:

* the session is not blocked by a resource alarm (an alarm blocks per publish);
* every message has the same routing key, no headers (so no CC/BCC, scheduling, LVQ key or
  delay header) and no expiration, and the exchange is not a delayed one nor the reply-to
  address: routing is then `VHost.route(exchange, key)` alone, done once for the run;
* that routing reaches exactly one queue (none: unroutable or an alternate exchange; several:
  per-queue outcomes differ), with no fetching consumer (publisher flow is a per-publish
  decision) and no no-local consumer (whether the queue takes a message depends on its
  connection), which is this shard's own (not a copy of another shard's, forwarded per
  message), which takes runs (`Queue.takes_runs`: the queue is plain, `Queue.plain`, the
  property every publish path reads, and already pages its new messages);
* no message is persistent while the queue is durable (journaling records each message's
  seq as it is enqueued: those go through the per-message step).

Then, per message: the confirm seq and the de-duplication window's verdict
(`PublishDedup.admit_run`: the windows and journal calls of `admit`, which the per-message
routing makes, in the same order); once for the run: the
admitted messages into the queue (`Queue.publish_run`), the queue marked dirty, the
`published` count. Every admitted message is enqueued (the queue has no limit) and none is
stored, so every confirm is released at once (a duplicate is confirmed like an accepted
message, as the per-message path does).

`ingest_columns` is the same step for a run that arrives as columns (`RunColumns`: the
streams API's bulk publish and the 0-9-1 publish runs, built by the AMQP 0-9-1 adapter from
property lists it could read without decoding): one guard (`_target`, plus no persistent
message to a durable queue), one admission (`_admit`), and the admitted rows go to the queue
as columns, to be written as PAGED_RUN records straight from them (`storage/pageruns.py`).
When it refuses, the caller makes the run's `Message`s (`RunColumns.messages`) and takes them
through the per-message pipeline.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Protocol

from ringmq.core.delivery import REPLY_TO_PREFIX
from ringmq.core.entities import QueueEntity
from ringmq.core.exchange import Exchange
from ringmq.core.message import Message
from ringmq.core.queue import RunColumns
from ringmq.core.routing import ExchangeType
from ringmq.core.session import PublishMode, Session
from ringmq.core.vhost import VHost

if TYPE_CHECKING:
    from ringmq.core.resources import Resources
    from ringmq.core.state import State

INGEST_RUN: Final = 256
"""Messages `publishbatch.publish_batch` offers `ingest_run` at a time."""

_DELAYED: Final = ExchangeType.DELAYED
_CONFIRM: Final = PublishMode.CONFIRM
_TX: Final = PublishMode.TX


class Pipeline(Protocol):
    """What the bulk step reads of the publish pipeline (`publish.Publisher`, which imports
    this module, so it is named here by what it provides rather than imported): the shared
    registry and call in progress, and the resources (alarms)."""

    @property
    def state(self) -> State: ...

    @property
    def resources(self) -> Resources: ...


def _target(pub: Pipeline, s: Session, vh: VHost, x: Exchange, rk: str) -> QueueEntity | None:
    # The guard's questions about the target (module docstring), for a run to `x` with
    # routing key `rk` whose messages have no headers and no expiration: the one queue it
    # reaches, or None when the run must go one message at a time.
    if pub.resources.alarms_on or x.type is _DELAYED or s.mode is _TX:
        return None
    if not x.name and rk.startswith(REPLY_TO_PREFIX):
        return None
    queues = vh.route(x, rk, None)
    if len(queues) != 1:
        return None
    q = queues[0]
    # `takes_runs` holds the queue's side (`Queue.plain`, the property every publish path
    # reads); the consumers' side is ours. A stream appends chunks to its log instead; another
    # shard's queue is forwarded (core/forwarding.py), one message at a time.
    if (
        q.consumers.fetchers
        or q.no_local is not None
        or q.stream is not None
        or q.owner is not None
        or not q.queue.takes_runs
    ):
        return None
    return q


def _admit(
    pub: Pipeline,
    s: Session,
    vh: VHost,
    x: Exchange,
    q: QueueEntity,
    ids: Sequence[str | None],
    now_ms: int,
    released: list[int],
) -> list[bool]:
    # A run the guard took: counted, numbered for confirms, de-duplicated (the verdict per
    # message).
    n = len(ids)
    state = pub.state
    state.stats["published"] += n
    s.counts.received += n
    if s.mode is _CONFIRM:
        released.extend(s.next_publish_seqs(n))
    return state.dedup.admit_run(vh.name, x, q, ids, now_ms)


def ingest_run(
    pub: Pipeline,
    s: Session,
    vh: VHost,
    x: Exchange,
    msgs: Sequence[Message],
    now_ms: int,
    released: list[int],
) -> bool:
    """Publish `msgs` on `s` to `x` in one step if the guard allows it (module docstring).

    Returns False, having done nothing, when the run must go one message at a time; True
    when every message was published (their confirm seqs, if any, appended to `released`).
    """
    if not msgs:
        return False
    rk = msgs[0].routing_key
    q = _target(pub, s, vh, x, rk)
    if q is None:
        return False
    durable = q.durable
    for m in msgs:
        if (
            m.routing_key != rk
            or m.headers is not None
            or m.expiration_ms is not None
            or (durable and m.persistent)
        ):
            return False
    ok = _admit(pub, s, vh, x, q, [m.message_id for m in msgs], now_ms, released)
    taken = [m for m, keep in zip(msgs, ok, strict=True) if keep]
    if taken:
        q.queue.publish_run(taken, now_ms)
        pub.state.dirty[id(q)] = q
    return True


def ingest_columns(
    pub: Pipeline,
    s: Session,
    vh: VHost,
    x: Exchange,
    run: RunColumns,
    now_ms: int,
    released: list[int],
) -> bool:
    """`ingest_run` of a run given as columns (`RunColumns`: one routing key, no headers or
    expiration by construction), with no `Message` per message: the same guard, counts,
    confirms and de-duplication verdicts, the admitted rows handed to the queue as columns
    (`Queue.publish_columns`). False, having done nothing, when the guard refuses."""
    if not len(run):
        return False
    q = _target(pub, s, vh, x, run.routing_key)
    if q is None or (q.durable and 1 in run.persistent):
        return False
    ok = _admit(pub, s, vh, x, q, run.ids, now_ms, released)
    kept = run.kept(ok)
    if len(kept):
        q.queue.publish_columns(kept)
        pub.state.dirty[id(q)] = q
    return True
