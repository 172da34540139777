"""Browse answers as columns: rows held in column arrays, not as per-message objects.

Theory of operation
-------------------
A columnar browse (`Queue.browse_columns`) fills one `Columns`: seqs, redelivered flags and
timestamps in typed arrays; exchange, routing key, raw properties and body in four
`VarColumn`s. Rows come from three places. Messages in memory are added with `add_message`,
which encodes the exchange and routing key (caching the encodings: a browse sees few of them).
Page records are read in place by the spill store, which appends the byte strings exactly as
the record holds them straight to the columns' open row lists (`SpillStore.peek_columns`), so
no `Message`, entry or delivery is built for a paged message. A *page run* (a run of plain
messages paged out as one columnar record, `storage/pageruns.py`) goes in as blocks: its
lengths and one slice of its concatenated values per column (`VarColumn.add_block`), no
Python object per row at all. The streams API writes the columns to the wire as they are
(`management.streamwire.encode_column_set`: each column's lengths, then its pieces); Spark
maps them into Arrow buffers.

A `VarColumn` is a list of segments in row order: open lists of values appended one by one,
and blocks (u32 lengths, the values concatenated). The row-wise edits (`truncate` below the
length, a partial `extend`, `drop_rows`, `set_rows`) are rare and rebuild the column as one
list (`values`).

Rows are appended in seq order by every producer; `merged` combines the in-memory rows and the
paged rows of one browse by seq (the two are ordered each, and usually do not interleave).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Final

from ringmq.core.message import Message, amqp091_content

__all__ = ["Columns", "VarColumn"]

_ENCODINGS_KEPT: Final = 4096  # distinct routing keys whose encodings a browse caches

Piece = bytes | memoryview
_Block = tuple["array[int]", Piece]


class VarColumn:
    """One variable-length column in row order (see the module docstring)."""

    __slots__ = ("_open", "_segs")

    def __init__(self, values: list[bytes] | None = None) -> None:
        self._segs: list[list[bytes] | _Block] = []
        self._open: list[bytes] | None = None
        if values:
            self._open = values
            self._segs.append(values)

    def rows(self) -> list[bytes]:
        """The open list: values appended to it are the column's next rows (a block added
        afterwards closes it: take it again after `add_block`)."""
        o = self._open
        if o is None:
            o = self._open = []
            self._segs.append(o)
        return o

    def append(self, value: bytes) -> None:
        """Append one row."""
        self.rows().append(value)

    def add_block(self, lengths: array[int], data: Piece) -> None:
        """Append `len(lengths)` rows: their u32 lengths and their values concatenated."""
        if lengths:
            self._segs.append((lengths, data))
            self._open = None

    def add_repeated(self, value: bytes, n: int) -> None:
        """Append `n` rows of the same value."""
        if n > 0:
            self.add_block(array("I", (len(value),)) * n, value * n)

    def __len__(self) -> int:
        return sum(len(s) if isinstance(s, list) else len(s[0]) for s in self._segs)

    def lengths(self) -> array[int]:
        """Every row's length, in row order (a fresh array)."""
        segs = self._segs
        if len(segs) == 1 and isinstance(segs[0], list):  # rows only: the common case
            return array("I", map(len, segs[0]))
        out: array[int] = array("I")
        for s in segs:
            out.extend(array("I", map(len, s)) if isinstance(s, list) else s[0])
        return out

    def extend_pieces(self, parts: list[Piece]) -> None:
        """Append to `parts` the values concatenated, in pieces (what the wire carries after
        the lengths): each row's value, a block's one slice."""
        for s in self._segs:
            if isinstance(s, list):
                parts += s
            else:
                parts.append(s[1])

    def values(self) -> list[bytes]:
        """Every row's value (blocks sliced: the rare row-wise paths)."""
        out: list[bytes] = []
        for s in self._segs:
            if isinstance(s, list):
                out += s
                continue
            lengths, data = s
            at = 0
            for n in lengths:
                out.append(bytes(data[at : at + n]))
                at += n
        return out

    def __eq__(self, other: object) -> bool:
        """Same values in the same rows (however they are held); a list of values compares
        too."""
        if isinstance(other, VarColumn):
            return self.values() == other.values()
        if isinstance(other, list):
            return self.values() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def _reset(self, values: list[bytes]) -> None:
        self._segs = [values]
        self._open = values

    def truncate(self, n: int) -> None:
        """Keep the first `n` rows."""
        if n < len(self):
            self._reset(self.values()[:n])

    def extend(self, other: VarColumn, start: int, stop: int) -> None:
        """Append `other`'s rows `[start:stop)` (`stop` at most its length)."""
        if start == 0 and stop >= len(other):
            for s in other._segs:
                self._segs.append(list(s) if isinstance(s, list) else s)
            self._open = None
        else:
            self.rows().extend(other.values()[start:stop])

    def keep(self, rows: list[int]) -> None:
        """Keep only the rows at the indices `rows` (in order)."""
        vals = self.values()
        self._reset([vals[i] for i in rows])

    def set_rows(self, changes: dict[int, bytes]) -> None:
        """Replace the values of some rows (by index)."""
        if changes:
            vals = self.values()
            for i, v in changes.items():
                vals[i] = v
            self._reset(vals)


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
        self.exchanges = VarColumn()
        self.routing_keys = VarColumn()
        self.properties = VarColumn()
        self.bodies = VarColumn()
        self._enc: dict[str, bytes] = {}

    def __len__(self) -> int:
        return len(self.seqs)

    def var_columns(self) -> tuple[VarColumn, VarColumn, VarColumn, VarColumn]:
        """Exchange, routing key, properties and body, in the wire's order."""
        return self.exchanges, self.routing_keys, self.properties, self.bodies

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
        exchanges = self.exchanges.rows()
        keys = self.routing_keys.rows()
        props = self.properties.rows()
        bodies = self.bodies.rows()
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
        for mine, theirs in zip(self.var_columns(), other.var_columns(), strict=True):
            mine.extend(theirs, start, end)

    def truncate(self, n: int) -> None:
        """Keep the first `n` rows."""
        if n >= len(self):
            return
        del self.seqs[n:]
        del self.redelivered[n:]
        del self.timestamps[n:]
        for col in self.var_columns():
            col.truncate(n)

    def drop_rows(self, rows: set[int]) -> None:
        """Remove the rows at the indices `rows` (rare: rebuilds every column)."""
        keep = [i for i in range(len(self)) if i not in rows]
        self.seqs = array("Q", [self.seqs[i] for i in keep])
        self.redelivered = bytearray(self.redelivered[i] for i in keep)
        self.timestamps = array("q", [self.timestamps[i] for i in keep])
        for col in self.var_columns():
            col.keep(keep)

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
        # Both concatenated, then the rows picked in seq order (a stable merge by seq).
        both = Columns()
        both.extend(self)
        both.extend(other)
        seqs = both.seqs
        order = sorted(range(len(seqs)), key=seqs.__getitem__)[:limit]
        out = Columns()
        out.seqs = array("Q", [seqs[i] for i in order])
        out.redelivered = bytearray(both.redelivered[i] for i in order)
        out.timestamps = array("q", [both.timestamps[i] for i in order])
        for mine, theirs in zip(out.var_columns(), both.var_columns(), strict=True):
            vals = theirs.values()
            mine.rows().extend(vals[i] for i in order)
        return out
