"""The streams API's part of the management facade: offset readers' reservation books and
bulk publishes (`StreamsFacade`, a base of `admin.CoreAdmin`).

Theory of operation: the streams endpoints (`streams`, `streamreads`, `streampublish`) call
these methods on the one facade, `CoreAdmin`. Reads and settles go to the broker's reservation
books (`Broker.streams`, one per destructive queue: a lease per consumer over a range of
positions); messages a lease gives back are dispatched at once (`Broker.queue_changed`), and
their effects applied through the `Runtime` in the batch the endpoint already runs in. Bulk
publishes run on an in-process *virtual connection* (negative ids, which never collide with
the server's) whose session 1 is in confirm mode, through the AMQP 0-9-1 adapter, so that
they are exactly AMQP publishes. Errors are `BrokerError`s (the bulk publish's `AMQPError`s)
or `ValueError`.

Runs on the broker's loop thread; nothing here blocks or locks.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Sequence
from typing import Any

from ringmq.adapters.amqp091 import Amqp091
from ringmq.core.broker import Broker
from ringmq.core.effects import Effect
from ringmq.core.entities import QueueEntity
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.message import Message, SeqId
from ringmq.core.publishbatch import BatchPublished
from ringmq.core.queue.columns import Columns
from ringmq.core.reservations import Lease, Reservations
from ringmq.management.port import Runtime
from ringmq.management.queueinfo import stream_bounds

Row = tuple[int, int, bool, Message]
"""One message read by the streams API: (position, queue seq, redelivered, message)."""


class StreamsFacade:
    """The streams endpoints' calls (see the module docstring)."""

    def __init__(self, broker: Broker, runtime: Runtime) -> None:
        self.broker = broker
        self.runtime = runtime
        self.amqp091 = Amqp091(broker)
        """Bulk publishes carry AMQP 0-9-1 properties: the 0-9-1 adapter publishes them."""
        self._virtual_ids = itertools.count(-1, -1)

    def _named(self, vhost: str, name: str) -> QueueEntity:
        return self.broker.topology.queue(self.broker.exchanges.vhost(vhost), name)

    def _book(self, vhost: str, name: str) -> tuple[QueueEntity, Reservations[SeqId]]:
        q = self._named(vhost, name)
        if q.settings.non_destructive:
            raise BrokerError(
                Condition.PRECONDITION_FAILED, f"queue {name!r} is non-destructive: use browse"
            )
        return q, self.broker.streams.book(q)

    def _kick(self, q: QueueEntity, now_ms: int) -> None:
        # Messages went back to the queue: let the broker dispatch them to waiting consumers.
        effects = self.broker.queue_changed(q, now_ms)
        if effects:
            self.runtime.apply_effects(effects)

    def reserve(
        self,
        vhost: str,
        name: str,
        consumer: str,
        start: int,
        max_messages: int,
        *,
        lease_ms: int,
        max_bytes: int | None,
        now_ms: int,
    ) -> dict[str, Any]:
        """Reserve positions from `start` for `consumer` (its lease); the range and bounds."""
        q, _ = self._book(vhost, name)
        r = self.broker.streams.reserve(
            q, consumer, start, max_messages, now_ms, lease_ms=lease_ms, max_bytes=max_bytes
        )
        return {
            "start": r.start,
            "end": r.end,
            "settled": r.settled,
            "next": r.next_pos,
            "skipped": r.skipped,
            "expired": r.expired,
            **stream_bounds(q),
        }

    def read_reserved(
        self, vhost: str, name: str, consumer: str, lo: int, hi: int, *, max_span: int, now_ms: int
    ) -> list[Row]:
        """The messages `consumer` holds at positions [lo, hi) (ValueError: a range wider than
        `max_span`)."""
        _, book = self._book(vhost, name)
        if hi - lo > max_span:
            raise ValueError(f"range too large (at most {max_span} positions)")
        return book.read_rows(consumer, lo, hi, now_ms)

    def read_reserved_columns(
        self, vhost: str, name: str, consumer: str, lo: int, hi: int, *, max_span: int, now_ms: int
    ) -> tuple[Columns, array[int]]:
        """`read_reserved` as columns and their positions (`Reservations.read_columns`: rows
        a reserve took raw go in as blocks of their page records)."""
        _, book = self._book(vhost, name)
        if hi - lo > max_span:
            raise ValueError(f"range too large (at most {max_span} positions)")
        return book.read_columns(consumer, lo, hi, now_ms)

    def settle(
        self, vhost: str, name: str, consumer: str, up_to: int, *, now_ms: int
    ) -> dict[str, Any]:
        """Settle `consumer`'s positions below `up_to` (the messages are deleted)."""
        q, book = self._book(vhost, name)
        deleted = self.broker.streams.settle(q, consumer, up_to, now_ms)
        lease = book.lease(consumer)
        return {
            "deleted": deleted,
            "settled": 0 if lease is None else lease.settled,
            **stream_bounds(q),
        }

    def browse_ready(
        self, vhost: str, name: str, after: int | None, limit: int, now_ms: int
    ) -> list[Row]:
        """Ready messages with seq > after, in seq order, left in place (a paged queue is read
        where it is and stays paged: `Queue.browse_ready`); position = seq."""
        q = self._named(vhost, name)
        cursor = None if after is None else SeqId(after)
        return [
            (d.seq, d.seq, d.redelivered, d.message)
            for d in q.queue.browse_ready(cursor, limit, now_ms)
        ]

    def browse_columns(
        self, vhost: str, name: str, after: int | None, limit: int, now_ms: int
    ) -> Columns:
        """`browse_ready` as columns (`Queue.browse_columns`: paged messages go from their
        page records to the columns without being built); position = seq."""
        q = self._named(vhost, name)
        return q.queue.browse_columns(None if after is None else SeqId(after), limit, now_ms)

    def drop_lease(self, vhost: str, name: str, consumer: str, *, now_ms: int) -> bool:
        """Forget `consumer`'s lease (its messages become ready again); False if unknown."""
        q, _ = self._book(vhost, name)
        found = self.broker.streams.drop(q, consumer, now_ms)
        if found:
            self._kick(q, now_ms)
        return found

    def stream_info(
        self, vhost: str, name: str, *, timestamp_ms: int | None = None
    ) -> tuple[dict[str, Any], list[Lease[SeqId]]]:
        """A queue's bounds (head included) and its leases; a stream queue's log bounds too
        (`type`, `first_offset`, `next_offset`, and with `timestamp_ms` the offset of the first
        chunk stored at or after it: `offset_at`)."""
        q = self._named(vhost, name)
        book = self.broker.streams.existing(q)
        leases = list(book.leases()) if book is not None else []
        bounds = stream_bounds(q, head=True)
        log = q.stream
        if log is not None:
            bounds["type"] = "stream"
            bounds["first_offset"] = log.index.first_offset
            bounds["next_offset"] = log.end  # what readers may see (committed reads)
            if timestamp_ms is not None:
                bounds["offset_at"] = log.offset_at(timestamp_ms)
        return bounds, leases

    def read_log_columns(
        self, vhost: str, name: str, lo: int, hi: int, *, max_span: int
    ) -> Columns:
        """Stream `name`'s messages at offsets `[lo, hi)` as columns (position = seq = offset).

        Exact and repeatable: offsets are stable, so the same range reads the same messages,
        short only where retention removed segments or below the log's end (ValueError: not
        a stream, or a range wider than `max_span`)."""
        log = self._named(vhost, name).stream
        if log is None:
            raise ValueError(f"queue {name!r} is not a stream (x-queue-type: stream)")
        if hi - lo > max_span:
            raise ValueError(f"range too large (at most {max_span} offsets)")
        cols = Columns()
        log.read_columns(lo, hi, cols)
        return cols

    def read_log_stored(
        self, vhost: str, name: str, lo: int, hi: int, *, max_span: int
    ) -> list[bytes] | None:
        """Stream `name`'s records holding offsets `[lo, hi)` as stored (`StreamLog.
        read_stored`: whole records, the reader trims by offset), None when the log keeps no
        stored form (ValueError: as `read_log_columns`)."""
        log = self._named(vhost, name).stream
        if log is None:
            raise ValueError(f"queue {name!r} is not a stream (x-queue-type: stream)")
        if hi - lo > max_span:
            raise ValueError(f"range too large (at most {max_span} offsets)")
        return log.read_stored(lo, hi)

    def expire_leases(self, now_ms: int) -> list[tuple[str, str, list[str]]]:
        """Expire the leases of every book: (vhost, queue, consumers) of each that gave
        messages back (the broker then dispatches them)."""
        out = []
        for q, gone in self.broker.streams.expire(now_ms):
            out.append((q.vhost, q.name, gone))
            self._kick(q, now_ms)
        return out

    # -- bulk publish on a virtual connection -----------------------------------------------

    def open_publisher(self, user: str, vhost: str, *, now_ms: int) -> int:
        """Open a virtual connection of `user` on `vhost`, session 1 in confirm mode (vhost
        access checked as an AMQP login's: BrokerError)."""
        conn_id = next(self._virtual_ids)
        broker = self.broker
        broker.connection_opened(
            conn_id,
            user,
            vhost,
            "http",
            {"product": "ringmq streams publish"},
            now_ms,
            protocol="http",
        )
        broker.channel_opened(conn_id, 1, now_ms)
        session = broker.session(conn_id, 1)
        assert session is not None
        broker.confirms.select(session)
        return conn_id

    def close_publisher(self, conn_id: int, *, now_ms: int) -> list[Effect]:
        """Forget a virtual connection; the effects its close caused."""
        return self.broker.connection_closed(conn_id, now_ms)

    def publish_slice(
        self,
        conn_id: int,
        exchange: str,
        messages: Sequence[tuple[str, bytes, bytes]],
        start: int,
        stop: int,
        *,
        now_ms: int,
    ) -> BatchPublished:
        """`messages[start:stop]` as that many `basic.publish` on the virtual connection
        (errors of the batch are AMQPErrors)."""
        return self.amqp091.publish_batch(conn_id, 1, exchange, messages, start, stop, now_ms)

    def confirms_held(self, conn_id: int) -> int:
        """Publishes of a virtual connection still waiting for their fsync."""
        conn = self.broker.conns.get(conn_id)
        session = None if conn is None else conn.sessions.get(1)
        return 0 if session is None else len(session.confirm_held)
