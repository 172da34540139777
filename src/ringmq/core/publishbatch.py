"""Batches: many publishes on one session as one call's worth of pipeline runs.

Theory of operation
-------------------
`publish_batch` is the streams API's bulk publish, a Spark sink's write and the AMQP 0-9-1
publish runs of a confirm channel (`adapters/amqp091/runs.py`): a batch of messages published
on one session to one exchange as that many publishes would be, each through the pipeline
(`Publisher.pipeline`, core/publish.py: classify, route, enqueue, confirm), with one confirm
step per batch (the acks of accepted publishes are coalesced in `released` and sent at the
end). It holds no state of its own: it runs inside the caller's call (`Broker.publish_batch`
opens it), flushes when a publish reached a queue that must dispatch before the next one
(`State.eager`: rings, limits), and stops at the first publish that raises or blocks its
connection.

The bulk form is a guard in front of the per-message steps, not a copy of them: each run of
`INGEST_RUN` messages, or the columns of a publish run, is offered to `core/ingest.py`, which
takes the run in one step only when every decision the steps would make is the same for each
message and trivial (one plain queue already paging), and otherwise leaves it to the pipeline,
message by message.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from ringmq.core.auth import AuthDB
from ringmq.core.effects import Block, Effect
from ringmq.core.errors import BrokerError
from ringmq.core.exchange import Exchange
from ringmq.core.ingest import INGEST_RUN, ingest_columns, ingest_run
from ringmq.core.message import Message
from ringmq.core.publish import Publisher
from ringmq.core.queue import RunColumns
from ringmq.core.session import Session


class BatchPublished:
    """What `publish_batch` did.

    Attributes:
        effects: the effects to apply, in order (confirms, deliveries, blocks...).
        published: messages of the batch taken by the broker (routed, refused with a negative
            confirm or dropped as duplicates).
        error: the error the next message raised (None if none): a `BrokerError` from the
            core, which an adapter may replace with its protocol's; the caller closes the
            session.
        blocked: the last published message blocked the connection (a resource limit).
    """

    __slots__ = ("blocked", "effects", "error", "published")

    def __init__(self, effects: list[Effect]) -> None:
        self.effects = effects
        self.published = 0
        self.error: Exception | None = None
        self.blocked = False


def publish_batch(
    publisher: Publisher,
    messages: Iterable[Message],
    *,
    session: Session,
    exchange: str,
    flush: Callable[[int], None],
    now_ms: int,
    columns: RunColumns | None = None,
) -> BatchPublished:
    """Publish `messages` (built lazily: a message that fails to build stops the batch
    there) to `exchange` on `session`, as that many publishes would (each through
    `publish`), with one confirm step per batch: the acks of confirmed publishes are
    coalesced and sent at the end (a refusal first sends the acks before it, so the order
    on the session is kept).

    The batch stops early at the first message whose publish raises (`error` is set,
    `published` counts the messages before it) or that blocks the connection (`blocked`;
    that message is published). `flush` is called with `now_ms` when a queue of the batch
    must dispatch before the next publish (rings, limits). Runs of messages that all go to
    the same plain queue are published in one step (`core/ingest.py`).

    `columns`, when given, are publishes that come before `messages`, as columns: offered
    whole to the columnar ingest (`ingest_columns`); while its guard refuses, they go as
    messages (`RunColumns.messages`), INGEST_RUN at a time, the way `messages` go, and
    the rest is offered again.
    """
    state = publisher.state
    s = session
    done = BatchPublished(state.out)
    out = done.effects
    conn_id = s.conn_id
    released: list[int] = []
    try:
        vh, x = publisher.exchange_for(s, exchange)
        if exchange not in s.write_ok:  # a topic permission: each key checked as it comes
            messages = _topic_checked(s, state.auth, x, columns, messages)
            columns = None
        publish = publisher.pipeline  # by position (see `publish`)
        it = iter(messages)
        more = True
        at = 0  # the columns' next row
        n_cols = 0 if columns is None else len(columns)
        while more:
            run: list[Message] = []
            failed: BrokerError | None = None
            if at < n_cols:
                # The columns first: whole when the columnar ingest takes them, else
                # their next INGEST_RUN rows as messages, one at a time below.
                assert columns is not None
                rest = columns.rows(at, n_cols)
                if ingest_columns(publisher, s, vh, x, rest, now_ms, released):
                    done.published += len(rest)
                    at = n_cols
                    continue
                run = columns.rows(at, at + INGEST_RUN).messages()
                at += len(run)
            else:
                # Runs of INGEST_RUN messages: the bulk step when its guard allows, else
                # one at a time (a message that fails to build ends the batch after the
                # ones built before it).
                try:
                    for msg in it:
                        run.append(msg)
                        if len(run) == INGEST_RUN:
                            break
                    else:
                        more = False
                except BrokerError as exc:
                    failed = exc
                    more = False
                if ingest_run(publisher, s, vh, x, run, now_ms, released):
                    done.published += len(run)
                    run = []
            for msg in run:
                n_out = len(out)
                publish(msg, s, vh, x, now_ms, False, None, True, (), released)
                done.published += 1
                if state.eager and state.dirty:
                    state.eager = False
                    flush(now_ms)
                if len(out) != n_out and any(
                    type(e) is Block and e.conn_id == conn_id for e in out[n_out:]
                ):
                    done.blocked = True
                    more = False
                    failed = None
                    break
            if failed is not None:
                raise failed
    except BrokerError as exc:
        done.error = exc
    if released:
        publisher.confirms.send(s, released)
    return done


def _topic_checked(
    s: Session,
    auth: AuthDB,
    x: Exchange,
    columns: RunColumns | None,
    messages: Iterable[Message],
) -> Iterator[Message]:
    # `publish_batch`'s messages (its columns first, as messages) with each routing key
    # checked by the user's topic permission: a refused key stops the batch there, as a
    # message that fails to build does.
    if columns is not None:
        for msg in columns.rows(0, len(columns)).messages():
            s.check_topic(auth, x, "write", msg.routing_key)
            yield msg
    for msg in messages:
        s.check_topic(auth, x, "write", msg.routing_key)
        yield msg
