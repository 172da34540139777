"""Page runs: a run of plain messages paged out as one columnar record (PAGED_RUN).

Theory of operation
-------------------
A Spark sink's backlog (or any burst of publishes past a queue's in-memory bound) reaches the
page file as runs of messages that share an exchange and a routing key and carry nothing a
queue decides on per message: no headers, no expiration, no per-queue expiry, the AMQP 0-9-1
form, no shared-store body. `PageQueue.push_back_spilled` writes such a run (`plain`) as one
PAGED_RUN record instead of one PAGED record each: the run's fields as columns, so that

* writing it is a few list comprehensions and one join, not an entry encoding per message;
* a browse (`add_columns`) moves a range of its rows into browse columns as blocks (the
  lengths and one slice of the concatenated values per column), no Python object per row;
* paging it in (`collect`) builds each message from the columns, without a per-record frame
  check or entry decode, as the spill store's `(seq, message, None)` item.

The record is read from the front; `PageQueue` keeps how many of the front record's rows were
taken already (`_Run.skip`), so a page-in may stop inside a record.

Payload layout (native byte order and sizes: page files are transient, wiped when the broker
starts, and never leave the machine)::

    =IIII      n, len(exchange), len(routing key), 0
    exchange, routing key                                  (UTF-8)
    u64[n] seqs   i64[n] timestamps   u8[n] priorities   u8[n] flags (1 persistent, 2 has id)
    u32[n] message-id lengths   u32[n] properties lengths   u32[n] body lengths
    message ids, properties, bodies                        (each concatenated in row order)

Pure: no file access; the caller frames and checks the record (`records.py`).
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate
from typing import Final, cast

from ringmq.core.message import Message, SeqId
from ringmq.core.queue.columns import Columns
from ringmq.core.queue.ports import RunColumns, Spilled

__all__ = [
    "MAX_RUN_BODIES",
    "MAX_RUN_ROWS",
    "PageRun",
    "RunRows",
    "column_records",
    "encode_columns",
    "encode_run",
    "plain",
    "run_end",
]

RUN_HEAD: Final = struct.Struct("=IIII")
MAX_RUN_ROWS: Final = 4096
"""Most messages in one PAGED_RUN record."""
MAX_RUN_BODIES: Final = 256 * 1024
"""Body bytes after which a run record is closed (it is read whole: keep it under a read)."""
_PERSISTENT: Final = 1
_HAS_ID: Final = 2
_FLAGS_WITH_ID: Final = bytes([_HAS_ID]) + bytes([_HAS_ID | _PERSISTENT]) * 255
"""`bytes.translate` table: a persistence byte (0: no) to the flags of a row with an id."""


def plain(message: Message, expires_at: int | None) -> bool:
    """Whether a spilled message can go into a run record (the module docstring)."""
    return (
        expires_at is None
        and message.headers is None
        and message.expiration_ms is None
        and not message.form
        and not message.store_ref
    )


def run_end(
    items: Sequence[tuple[int, Message, int | None]],
    i: int,
    holds: Callable[[int], bool] | None,
) -> tuple[int, int]:
    """The end of the run of `items` from `items[i]` (itself `plain`) that one record takes,
    and its body bytes: same exchange and routing key, `plain`, no journal copy (`holds`: a
    persistent message live in the journal is paged by reference; only persistent messages
    have one), at most MAX_RUN_ROWS messages and about MAX_RUN_BODIES bytes. A first message
    with a journal copy makes a run of one."""
    first = items[i][1]
    ex, rk = first.exchange, first.routing_key
    stop = min(len(items), i + MAX_RUN_ROWS)
    nbytes = 0
    j = i
    while j < stop and nbytes < MAX_RUN_BODIES:
        seq, m, expires_at = items[j]
        if (
            m.exchange != ex
            or m.routing_key != rk
            or not plain(m, expires_at)
            or (m.persistent and holds is not None and holds(seq))
        ):
            break
        nbytes += len(m.body)
        j += 1
    if j == i:
        return i + 1, len(first.body)
    return j, nbytes


def encode_run(items: Sequence[tuple[int, Message, int | None]]) -> bytes:
    """The PAGED_RUN payload of `items` (seq, message, None), all `plain`, in seq order, with
    one exchange and one routing key."""
    msgs = [m for _, m, _ in items]
    first = msgs[0]
    ids = [m.message_id for m in msgs]
    return _encode(
        first.exchange,
        first.routing_key,
        array("Q", [s for s, _, _ in items]),
        array("q", [m.timestamp_ms for m in msgs]),
        bytes([m.priority & 0xFF for m in msgs]),
        bytes([m.persistent for m in msgs]),
        ids,
        [m.properties_bin for m in msgs],
        [m.body for m in msgs],
    )


def encode_columns(seqs: Sequence[int], run: RunColumns, start: int, stop: int) -> bytes:
    """The PAGED_RUN payload of rows `[start:stop]` of `run` with those `seqs` (ascending):
    what `encode_run` writes for the same messages (`run.messages()`), built from the
    columns."""
    n = stop - start
    return _encode(
        run.exchange,
        run.routing_key,
        array("Q", seqs[start:stop]),
        array("q", [run.timestamp_ms]) * n,
        bytes(n),
        run.persistent[start:stop],
        run.ids[start:stop],
        run.props[start:stop],
        run.bodies[start:stop],
    )


def column_records(seqs: Sequence[int], run: RunColumns) -> Iterator[tuple[bytes, int, int, int]]:
    """The PAGED_RUN payloads of `run` with `seqs` (ascending): what `push_back_spilled`
    writes for `run.messages()` (records cut as `run_end` cuts them: every row is `plain`,
    with one exchange and routing key and no journal copy), each with its rows, body bytes
    and last seq."""
    # Cut as `run_end` cuts (rows are added while the record's bodies are under
    # MAX_RUN_BODIES, so the row that reaches it is the last), with cumulative body sizes.
    ends = list(accumulate(map(len, run.bodies)))
    n = len(ends)
    i = 0
    while i < n:
        stop = min(n, i + MAX_RUN_ROWS)
        base = ends[i - 1] if i else 0
        j = min(stop, bisect_left(ends, base + MAX_RUN_BODIES, i, stop) + 1)
        yield encode_columns(seqs, run, i, j), j - i, ends[j - 1] - base, seqs[j - 1]
        i = j


def _encode(
    exchange: str,
    routing_key: str,
    seqs: array[int],
    stamps: array[int],
    priorities: bytes,
    persistent: bytes,
    ids: Sequence[str | None],
    props: Sequence[bytes],
    bodies: Sequence[bytes],
) -> bytes:
    # The payload layout of the module docstring, from its columns (`persistent`: 1 or 0).
    ex = exchange.encode()
    rk = routing_key.encode()
    n = len(bodies)
    whole = None not in ids
    joined = "".join(cast("Sequence[str]", ids)) if whole else ""
    raw = joined.encode()
    if n and whole and len(raw) == len(joined):
        # Every row has an id, all ASCII: their bytes are the string's, one encode; flags by
        # table from the persistence bytes.
        id_lens = array("I", map(len, cast("Sequence[str]", ids)))
        flags = bytes(persistent).translate(_FLAGS_WITH_ID)
        id_parts = [raw]
    else:
        id_bytes = [b"" if i is None else i.encode() for i in ids]
        id_lens = array("I", map(len, id_bytes))
        flags = bytes(
            [
                (_PERSISTENT if p else 0) | (0 if i is None else _HAS_ID)
                for p, i in zip(persistent, ids, strict=True)
            ]
        )
        id_parts = id_bytes
    return b"".join(
        [
            RUN_HEAD.pack(n, len(ex), len(rk), 0),
            ex,
            rk,
            seqs.tobytes(),
            stamps.tobytes(),
            priorities,
            flags,
            id_lens.tobytes(),
            array("I", map(len, props)).tobytes(),
            array("I", map(len, bodies)).tobytes(),
            *id_parts,
            *props,
            *bodies,
        ]
    )


def _array(code: str, data: bytes | memoryview, at: int, n: int) -> tuple[array[int], int]:
    a: array[int] = array(code)
    stop = at + n * a.itemsize
    a.frombytes(data[at:stop])
    return a, stop


class PageRun:
    """One PAGED_RUN record's columns, read from the payload at `data[start:stop]`.

    Raises:
        ValueError: the payload does not hold what its head says (a corrupt record).
    """

    __slots__ = (
        "bodies_at",
        "body_lens",
        "data",
        "exchange",
        "flags",
        "id_lens",
        "ids_at",
        "n",
        "priorities",
        "prop_lens",
        "props_at",
        "routing_key",
        "seqs",
        "stamps",
    )

    def __init__(self, data: bytes | memoryview, start: int, stop: int) -> None:
        n, n_ex, n_rk, _ = RUN_HEAD.unpack_from(data, start)
        at = start + RUN_HEAD.size
        self.n = n
        self.data = data
        self.exchange = bytes(data[at : at + n_ex])
        at += n_ex
        self.routing_key = bytes(data[at : at + n_rk])
        at += n_rk
        self.seqs, at = _array("Q", data, at, n)
        self.stamps, at = _array("q", data, at, n)
        self.priorities = data[at : at + n]
        self.flags = data[at + n : at + 2 * n]
        self.id_lens, at = _array("I", data, at + 2 * n, n)
        self.prop_lens, at = _array("I", data, at, n)
        self.body_lens, at = _array("I", data, at, n)
        self.ids_at = at
        self.props_at = at + sum(self.id_lens)
        self.bodies_at = self.props_at + sum(self.prop_lens)
        if len(self.body_lens) != n or self.bodies_at + sum(self.body_lens) != stop:
            raise ValueError("page run record does not match its head")

    def collect(
        self,
        k: int,
        out: list[Spilled],
        tombstones: dict[int, int],
        room: int,
        byte_room: int | None,
        *,
        low: int = -1,
        take: bool = True,
    ) -> tuple[int, int, int]:
        """Append to `out` the items (seq, message, None) of rows from `k` on, until `room`
        were appended or their bodies reach `byte_room`; rows with a seq at or below `low` or
        tombstoned are skipped (with `take`, a paging-in, their tombstones are removed).

        Returns (the next row, body bytes of the rows passed, body bytes of those appended).
        """
        data = self.data
        assert isinstance(data, bytes), "a page-in reads its records into bytes"
        ex = self.exchange.decode()
        rk = self.routing_key.decode()
        seqs = cast("Sequence[SeqId]", self.seqs)  # (no SeqId() call per row)
        stamps = self.stamps
        prios = self.priorities
        flags = self.flags
        id_lens = self.id_lens
        prop_lens = self.prop_lens
        body_lens = self.body_lens
        i = self.ids_at + sum(id_lens[:k])
        p = self.props_at + sum(prop_lens[:k])
        b = self.bodies_at + sum(body_lens[:k])
        passed = took = got = 0
        n = self.n
        append = out.append
        while k < n and got < room and (byte_room is None or took < byte_room):
            seq = seqs[k]
            il = id_lens[k]
            pl = prop_lens[k]
            bl = body_lens[k]
            f = flags[k]
            passed += bl
            if seq > low and not (
                tombstones
                and (tombstones.pop(seq, None) if take else tombstones.get(seq)) is not None
            ):
                msg = Message(
                    ex,
                    rk,
                    data[p : p + pl],
                    data[b : b + bl],
                    None,
                    prios[k],
                    None,
                    f & _PERSISTENT == _PERSISTENT,
                    data[i : i + il].decode() if f & _HAS_ID else None,
                    stamps[k],
                )
                append((seq, msg, None))
                took += bl
                got += 1
            i += il
            p += pl
            b += bl
            k += 1
        return k, passed, took

    def add_columns(
        self, k: int, low: int, tombstones: dict[int, int], room: int, out: Columns
    ) -> tuple[int, int]:
        """Append to `out`, as blocks, up to `room` rows from `k` on with a seq above `low`,
        tombstoned ones left out. Returns (rows added, the seq of the last row added or -1)."""
        seqs = self.seqs
        n = self.n
        a = max(k, bisect_right(seqs, low))
        added = 0
        last = -1
        while a < n and added < room:
            if tombstones:
                while a < n and seqs[a] in tombstones:
                    a += 1
                b = a
                while b < n and b - a < room - added and seqs[b] not in tombstones:
                    b += 1
            else:
                b = min(n, a + room - added)
            if a >= b:
                break
            self.block(a, b, out)
            added += b - a
            last = seqs[b - 1]
            a = b
        return added, last

    def block(self, a: int, b: int, out: Columns) -> None:
        """Rows `[a, b)` into `out`: array slices, and one slice of the record per column."""
        view = memoryview(self.data)
        k = b - a
        out.seqs.extend(self.seqs[a:b])
        out.redelivered += bytes(k)
        out.timestamps.extend(self.stamps[a:b])
        out.exchanges.add_repeated(self.exchange, k)
        out.routing_keys.add_repeated(self.routing_key, k)
        for col, lens, at in (
            (out.properties, self.prop_lens, self.props_at),
            (out.bodies, self.body_lens, self.bodies_at),
        ):
            start = at + sum(lens[:a])
            part = lens[a:b]
            col.add_block(part, view[start : start + sum(part)])


class RunRows:
    """Rows `[a, b)` of a page run held as they are (`core.queue.ports.RawRows`): a raw
    reservation's rows, taken out of the page file without a message built for each. The
    record (its payload at `[at, stop)` of `run.data`, bytes read or a view of the mapped page
    file) stays referenced until every part of it is settled or given back."""

    __slots__ = ("a", "at", "b", "nbytes", "run", "seqs", "sizes", "stop")

    def __init__(self, run: PageRun, a: int, b: int, at: int, stop: int) -> None:
        self.run = run
        self.a = a
        self.b = b
        self.at = at
        self.stop = stop
        self.seqs: array[int] = run.seqs[a:b]
        self.sizes: array[int] = run.body_lens[a:b]
        self.nbytes = sum(self.sizes)

    def __len__(self) -> int:
        return self.b - self.a

    def part(self, i: int, j: int) -> RunRows:
        """Rows `[i, j)` of these rows (indexes relative to them)."""
        return RunRows(self.run, self.a + i, self.a + j, self.at, self.stop)

    def items(self) -> list[Spilled]:
        """The rows as spill items `(seq, message, None)` (the page-in's messages; a mapped
        record is copied out first: messages hold bytes)."""
        run = self.run
        if not isinstance(run.data, bytes):
            run = PageRun(bytes(run.data[self.at : self.stop]), 0, self.stop - self.at)
        out: list[Spilled] = []
        run.collect(self.a, out, {}, self.b - self.a, None)
        return out

    def add_columns(self, i: int, j: int, out: Columns) -> None:
        """Rows `[i, j)` of these rows into `out` as blocks (`PageRun.block`)."""
        self.run.block(self.a + i, self.a + j, out)
