"""The storage ports a queue pages through, and their in-memory implementations.

`BodyStore` takes bodies paged one by one (flow-to-disk limits); `SpillStore` keeps a queue's
paged tail in order; `RawRows` are spilled rows a raw reservation holds as the store keeps
them (rawtake.py). The storage layer provides disk implementations that satisfy these
Protocols structurally; this module must not import storage/.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Sequence
from itertools import compress
from typing import Protocol

from ringmq.core.message import Message, SeqId
from ringmq.core.queue.columns import Columns

__all__ = [
    "BodyStore",
    "MemoryBodyStore",
    "MemorySpillStore",
    "RawRows",
    "RunColumns",
    "SpillStore",
    "Spilled",
]


class BodyStore(Protocol):
    """Where message bodies go when a queue pages them out (flow_to_disk / PAGE)."""

    def page_out(self, queue: str, seq: SeqId, message: Message) -> None:
        """Take the message; the queue drops its reference."""

    def page_in(self, queue: str, seq: SeqId) -> Message:
        """Give the message back and forget it."""
        ...

    def peek(self, queue: str, seq: SeqId) -> Message:
        """Read the message and keep it (browse)."""
        ...

    def discard(self, queue: str, seq: SeqId) -> None:
        """Forget the message (purged, evicted)."""


Spilled = tuple[SeqId, Message, int | None]
"""One spilled message: (seq, message, expires_at epoch ms or None)."""


class RunColumns:
    """A run of plain publishes as columns, with no `Message` per publish (the columnar
    ingest, `core/ingest.py`): one exchange and routing key, one broker timestamp, and per
    message its raw properties, body, message id and persistence; no headers, priority or
    expiration (the adapter that makes it read that from each property list).

    `messages` makes the `Message`s these columns stand for (what the adapter's one-at-a-time
    build gives for the same publishes): the per-message path takes them when the ingest
    guard refuses the run, and a spill store that keeps messages (`MemorySpillStore`).
    """

    __slots__ = ("bodies", "exchange", "ids", "persistent", "props", "routing_key", "timestamp_ms")

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        timestamp_ms: int,
        props: Sequence[bytes],
        bodies: Sequence[bytes],
        ids: Sequence[str | None],
        persistent: bytes,
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.timestamp_ms = timestamp_ms
        self.props = props
        self.bodies = bodies
        self.ids = ids
        self.persistent = persistent
        """One byte per message: 1 when persistent (delivery_mode 2), else 0."""

    def __len__(self) -> int:
        return len(self.bodies)

    def rows(self, start: int, stop: int) -> RunColumns:
        """The messages `[start:stop]` (self when that is all of them)."""
        if start == 0 and stop >= len(self.bodies):
            return self
        return RunColumns(
            self.exchange,
            self.routing_key,
            self.timestamp_ms,
            self.props[start:stop],
            self.bodies[start:stop],
            self.ids[start:stop],
            self.persistent[start:stop],
        )

    def kept(self, keep: Sequence[bool]) -> RunColumns:
        """The messages whose `keep` is true (a de-duplication window's verdicts)."""
        if all(keep):
            return self
        return RunColumns(
            self.exchange,
            self.routing_key,
            self.timestamp_ms,
            list(compress(self.props, keep)),
            list(compress(self.bodies, keep)),
            list(compress(self.ids, keep)),
            bytes(compress(self.persistent, keep)),
        )

    def messages(self) -> list[Message]:
        """The messages of the run, in order."""
        ex, rk, ts = self.exchange, self.routing_key, self.timestamp_ms
        return [
            Message(ex, rk, p, b, None, 0, None, f == 1, i, ts)
            for p, b, i, f in zip(self.props, self.bodies, self.ids, self.persistent, strict=True)
        ]


class RawRows(Protocol):
    """Spilled rows taken out of a `SpillStore` as it keeps them (no message built for each):
    a raw reservation's rows (rawtake.py). Ascending seqs."""

    @property
    def seqs(self) -> array[int]:
        """The rows' seqs, ascending."""
        ...

    @property
    def sizes(self) -> array[int]:
        """The rows' body sizes."""
        ...

    @property
    def nbytes(self) -> int:
        """The sum of `sizes`."""
        ...

    def __len__(self) -> int: ...

    def part(self, i: int, j: int) -> RawRows:
        """Rows `[i, j)` of these rows."""
        ...

    def items(self) -> list[Spilled]:
        """The rows as spill items (their messages built, as a page-in builds them)."""
        ...

    def add_columns(self, i: int, j: int, out: Columns) -> None:
        """Append rows `[i, j)` to `out` (redelivered flags 0)."""


class SpillStore(Protocol):
    """Where a queue's paged tail lives: an ordered sequence of never-delivered messages.

    The queue decides the order; the store keeps it: `push_back` appends after everything,
    `push_front` inserts a run before everything, `pop_front` returns the oldest in order.
    """

    keeps_raw: bool
    """Whether `pop_raw` may hand rows over raw (a store of page records); when not, a
    reserve reads ahead exactly as single fetches do."""

    def push_back(self, items: Sequence[Spilled]) -> None:
        """Append after everything spilled, in the given order."""

    def push_back_run(self, seqs: Sequence[int], run: RunColumns) -> None:
        """`push_back` of the messages of `run` with `seqs` (ascending), straight from the
        columns where the store can (the same messages as `run.messages()` read back)."""

    def push_front(self, items: Sequence[Spilled]) -> None:
        """Insert before everything spilled, in the given order."""

    def pop_front(self, max_count: int, max_bytes: int) -> list[Spilled]:
        """Take up to `max_count` items (about `max_bytes` of bodies, at least one)."""
        ...

    def pop_raw(self, max_count: int, max_bytes: int | None, first: bool) -> Sequence[RawRows]:
        """Take the oldest items as `RawRows` where the store can keep them raw: up to
        `max_count`, each while the bodies before it are below `max_bytes` (with `first`, the
        first always). Empty when the front cannot be taken raw (then `pop_front`)."""
        ...

    def peek_after(self, after: int | None, limit: int) -> list[Spilled]:
        """Up to `limit` items with a seq above `after`, in order, leaving them in place."""
        ...

    def peek_columns(self, after: int | None, limit: int, now_ms: int, out: Columns) -> int | None:
        """Append to `out`, until it holds `limit` rows, the items with a seq above `after` in
        order, leaving them in place; items expired at `now_ms` are left out, redelivered flags
        are 0. Returns the seq of the last item read when it stopped because `out` filled up
        (more may follow), None when everything after `after` was read."""
        ...

    def clear(self) -> None:
        """Forget everything (purge); the store stays usable."""

    def close(self) -> None:
        """Forget everything and release files (queue deleted)."""


class MemorySpillStore:
    """`SpillStore` in a deque (tests; memory is not saved)."""

    keeps_raw = False  # items in memory are messages already: they page in

    def __init__(self) -> None:
        self.items: deque[Spilled] = deque()

    def push_back(self, items: Sequence[Spilled]) -> None:
        self.items.extend(items)

    def push_back_run(self, seqs: Sequence[int], run: RunColumns) -> None:
        self.items.extend((SeqId(s), m, None) for s, m in zip(seqs, run.messages(), strict=True))

    def push_front(self, items: Sequence[Spilled]) -> None:
        self.items.extendleft(reversed(items))

    def pop_front(self, max_count: int, max_bytes: int) -> list[Spilled]:
        out: list[Spilled] = []
        got = 0
        items = self.items
        while items and len(out) < max_count and (not out or got < max_bytes):
            item = items.popleft()
            out.append(item)
            got += len(item[1].body)
        return out

    def pop_raw(self, max_count: int, max_bytes: int | None, first: bool) -> Sequence[RawRows]:
        return []  # items in memory are messages already: they page in

    def peek_after(self, after: int | None, limit: int) -> list[Spilled]:
        out: list[Spilled] = []
        for item in self.items:
            if len(out) >= limit:
                break
            if after is None or item[0] > after:
                out.append(item)
        return out

    def peek_columns(self, after: int | None, limit: int, now_ms: int, out: Columns) -> int | None:
        for seq, msg, expires_at in self.items:
            if len(out) >= limit:
                return out.seqs[-1] if out else after
            if after is not None and seq <= after:
                continue
            if expires_at is None or now_ms <= expires_at:
                out.add_message(seq, False, msg)
        return None

    def clear(self) -> None:
        self.items.clear()

    def close(self) -> None:
        self.items.clear()

    def __len__(self) -> int:
        return len(self.items)


class MemoryBodyStore:
    """Default `BodyStore`: a dict (paging is accounted for but bodies stay in RAM)."""

    def __init__(self) -> None:
        self._bodies: dict[tuple[str, SeqId], Message] = {}

    def page_out(self, queue: str, seq: SeqId, message: Message) -> None:
        self._bodies[(queue, seq)] = message

    def page_in(self, queue: str, seq: SeqId) -> Message:
        return self._bodies.pop((queue, seq))

    def peek(self, queue: str, seq: SeqId) -> Message:
        return self._bodies[(queue, seq)]

    def discard(self, queue: str, seq: SeqId) -> None:
        self._bodies.pop((queue, seq), None)

    def __len__(self) -> int:
        return len(self._bodies)
