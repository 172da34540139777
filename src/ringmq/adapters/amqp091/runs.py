"""Publish runs: consecutive basic.publish commands of one read as one batch of the core.

Consecutive basic.publish commands of one read on one confirm channel, to one exchange, none
mandatory (`publish_rows`), go as one `Amqp091.publish_batch`: the core's batch publish, which
routes a run to one plain paging queue once (`core/ingest.py`) and publishes anything else one
message at a time through the same pipeline, with one coalesced ack (`multiple`) where each
publish would have had its own. Its errors close the channel as the failing publish's would; a
publish that blocks the connection ends the batch and the rest of the run goes one by one.
Anything else (a mandatory publish, another method, a transactional or non-confirm channel, a
lone publish) takes the per-command path. The run channels are asked before each read
(`Amqp091.publish_run_channels`) and given to the connection
(`ServerConnection.publish_runs`), whose reader hands a run of whole publishes with one method
frame over as one `PublishRun` (columns, no command each): `publish_columns` gives it to
`Amqp091.publish_run` as it is.

Both are steps of `connection.Amqp091Handler.on_events`; they hold no state.
"""

from __future__ import annotations

from ringmq.adapters.amqp091.adapter import Amqp091
from ringmq.adapters.handler import Emit
from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.reply_codes import AMQPError
from ringmq.protocol import events as ev

_Command = ev.Command
_PUBLISH = spec.BasicPublish


def publish_rows(
    amqp091: Amqp091, conn_id: int, emit: Emit, events: list[ev.Event], start: int, now: int
) -> tuple[int, AMQPError | None, int]:
    """The publishes from `events[start]` on, as one `Amqp091.publish_batch` when they make a
    run (module docstring); returns (the index after what was handled, or 0 when nothing was;
    the error that closes the channel or connection; `solo`: the events up to there go one by
    one)."""
    first = events[start]
    assert type(first) is _Command
    ch = first.channel
    method = first.method
    assert type(method) is _PUBLISH
    exchange = method.exchange
    rows: list[tuple[str, bytes, bytes]] = []
    n = len(events)
    j = start
    while j < n:
        e = events[j]
        if type(e) is not _Command or e.channel != ch:
            break
        m = e.method
        content = e.content
        if (
            type(m) is not _PUBLISH
            or m.exchange != exchange
            or m.mandatory
            or m.immediate
            or content is None
        ):
            break
        rows.append((m.routing_key, content.properties_bin, content.body))
        j += 1
    if len(rows) < 2:
        return 0, None, j  # one publish: the per-command step (which reports any error)
    done = amqp091.publish_batch(conn_id, ch, exchange, rows, 0, len(rows), now)
    if done.effects:
        emit(done.effects)
    err = done.error
    if err is not None:
        assert isinstance(err, AMQPError)
        return j, err, 0
    if done.published < len(rows):
        # the batch stopped at a publish that blocked the connection: the rest of the run goes
        # one by one, as they would have
        return start + done.published, None, j
    return j, None, 0


def publish_columns(
    amqp091: Amqp091,
    conn_id: int,
    emit: Emit,
    run: ev.PublishRun,
    runs: set[int] | None,
    now: int,
) -> tuple[AMQPError | None, list[ev.Event]]:
    """A `PublishRun` as one `Amqp091.publish_run` (the batch `publish_rows` makes of the same
    publishes as commands, with its columns as they are); returns (the error that closes the
    channel or connection; the publishes left to go one by one, as commands: those after one
    that blocked the connection, or all of them when the channel no longer takes runs)."""
    ch = run.channel
    method = run.method
    assert type(method) is _PUBLISH
    bodies = run.bodies
    n = len(bodies)
    done_n = 0
    if runs and ch in runs:
        done = amqp091.publish_run(
            conn_id, ch, method.exchange, method.routing_key, run.properties, bodies, now
        )
        if done.effects:
            emit(done.effects)
        err = done.error
        if err is not None:
            assert isinstance(err, AMQPError)
            return err, []
        done_n = done.published
    props = run.properties
    return None, [
        _Command(ch, method, RawContent(60, len(bodies[k]), props[k], bodies[k]))
        for k in range(done_n, n)
    ]
