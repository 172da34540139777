"""Browse answers as columns: rows held in column arrays, not as per-message objects.

Theory of operation
-------------------
A columnar browse (`Queue.browse_columns`) fills one `Columns`: seqs, redelivered flags and
timestamps in typed arrays; exchange, routing key, raw properties and body as bytes in four
lists. Rows come from two places. Messages in memory are added with `add_message`, which
encodes the exchange and routing key (caching the encodings: a browse sees few of them). Page
records are read in place by the spill store, which appends the byte strings exactly as the
record holds them straight to the column lists (`SpillStore.peek_columns`), so no `Message`,
entry or delivery is built for a paged message. The streams API writes the columns to the wire
as they are (`management.streamwire.encode_columns`); Spark maps them into Arrow buffers.

Rows are appended in seq order by every producer; `merged` combines the in-memory rows and the
paged rows of one browse by seq (the two are ordered each, and usually do not interleave).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Final

from ringmq.core.message import Message, amqp091_content

__all__ = ["Columns"]

_ENCODINGS_KEPT: Final = 4096  # distinct routing keys whose encodings a browse caches


class Columns:
    """Browsed rows in seq order, one array or list per field (see the module docstring).

    Attributes:
        seqs: queue seqs (`array("Q")`).
        redelivered: 1 where the message was delivered before, else 0 (`bytearray`).
        timestamps: `Message.timestamp_ms` of each row (`array("q")`).
        exchanges: exchange names, UTF-8.
        routing_keys: routing keys, UTF-8.
        properties: raw properties as published (`Message.properties_bin`).
        bodies: message bodies.
    """

    __slots__ = (
        "_enc",
        "bodies",
        "exchanges",
        "properties",
        "redelivered",
        "routing_keys",
        "seqs",
        "timestamps",
    )

    def __init__(self) -> None:
        self.seqs: array[int] = array("Q")
        self.redelivered = bytearray()
        self.timestamps: array[int] = array("q")
        self.exchanges: list[bytes] = []
        self.routing_keys: list[bytes] = []
        self.properties: list[bytes] = []
        self.bodies: list[bytes] = []
        self._enc: dict[str, bytes] = {}

    def __len__(self) -> int:
        return len(self.seqs)

    def add_message(self, seq: int, redelivered: bool, msg: Message) -> None:
        """Append the row of a message held in memory."""
        self.add_rows(((seq, seq, redelivered, msg),))

    def add_rows(
        self, rows: Iterable[tuple[int, int, bool, Message]], positions: array[int] | None = None
    ) -> None:
        """Append the rows of messages held in memory, given as (position, seq, redelivered,
        message): the shape of range reads and browses. Positions go to `positions` (a
        reservation's; a browse's are its seqs: None)."""
        enc = self._enc
        seqs = self.seqs
        flags = self.redelivered
        stamps = self.timestamps
        exchanges = self.exchanges
        keys = self.routing_keys
        props = self.properties
        bodies = self.bodies
        for pos, seq, redelivered, msg in rows:
            if positions is not None:
                positions.append(pos)
            seqs.append(seq)
            flags.append(1 if redelivered else 0)
            stamps.append(msg.timestamp_ms)
            ex = enc.get(msg.exchange)
            if ex is None:
                ex = enc[msg.exchange] = msg.exchange.encode()
            rk = enc.get(msg.routing_key)
            if rk is None:
                rk = msg.routing_key.encode()
                if len(enc) < _ENCODINGS_KEPT:
                    enc[msg.routing_key] = rk
            exchanges.append(ex)
            keys.append(rk)
            if msg.form:  # another protocol's form: its AMQP 0-9-1 conversion (cached)
                pb, body = amqp091_content(msg)
                props.append(pb)
                bodies.append(body)
            else:
                props.append(msg.properties_bin)
                bodies.append(msg.body)

    def extend(self, other: Columns, start: int = 0, stop: int | None = None) -> None:
        """Append the rows `other[start:stop]` (slices of each column)."""
        end = len(other) if stop is None else min(stop, len(other))
        if start >= end:
            return
        self.seqs.extend(other.seqs[start:end])
        self.redelivered += other.redelivered[start:end]
        self.timestamps.extend(other.timestamps[start:end])
        self.exchanges += other.exchanges[start:end]
        self.routing_keys += other.routing_keys[start:end]
        self.properties += other.properties[start:end]
        self.bodies += other.bodies[start:end]

    def truncate(self, n: int) -> None:
        """Keep the first `n` rows."""
        if n >= len(self):
            return
        del self.seqs[n:]
        del self.redelivered[n:]
        del self.timestamps[n:]
        del self.exchanges[n:]
        del self.routing_keys[n:]
        del self.properties[n:]
        del self.bodies[n:]

    def drop_rows(self, rows: set[int]) -> None:
        """Remove the rows at the indices `rows` (rare: rebuilds every column)."""
        keep = [i for i in range(len(self)) if i not in rows]
        self.seqs = array("Q", [self.seqs[i] for i in keep])
        self.redelivered = bytearray(self.redelivered[i] for i in keep)
        self.timestamps = array("q", [self.timestamps[i] for i in keep])
        self.exchanges = [self.exchanges[i] for i in keep]
        self.routing_keys = [self.routing_keys[i] for i in keep]
        self.properties = [self.properties[i] for i in keep]
        self.bodies = [self.bodies[i] for i in keep]

    def merged(self, other: Columns, limit: int) -> Columns:
        """The first `limit` rows of `self` and `other` (each in seq order) by seq; `self` or
        `other` itself when the other holds nothing."""
        if not other:
            self.truncate(limit)
            return self
        if not self:
            other.truncate(limit)
            return other
        if self.seqs[-1] < other.seqs[0]:
            first, second = self, other
        elif other.seqs[-1] < self.seqs[0]:
            first, second = other, self
        else:
            return self._interleaved(other, limit)
        first.truncate(limit)
        first.extend(second, 0, limit - len(first))
        return first

    def _interleaved(self, other: Columns, limit: int) -> Columns:
        out = Columns()
        a, b = self.seqs, other.seqs
        i = j = 0
        while len(out) < limit and (i < len(a) or j < len(b)):
            if j >= len(b) or (i < len(a) and a[i] < b[j]):
                out.extend(self, i, i + 1)
                i += 1
            else:
                out.extend(other, j, j + 1)
                j += 1
        return out
