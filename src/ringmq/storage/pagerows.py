"""Page records read in place as browse columns, without building a message per record.

`peek_rows` is the record loop of `PageQueue.peek_columns`: it checks each frame as `scan`
does (length, CRC-32C), reads the few fields a browse returns straight from the record
(`records.entry_row_at`) and appends them to the columns of a `core.queue.columns.Columns`;
a message of another protocol's form is decoded and added as a message (`Columns.add_rows`).
A PAGED_REF record (a persistent message whose copy is in the journal) gets a placeholder row,
which the page queue fills from the journal afterwards (`PageQueue`'s batched `copies.read`).
Pure: no file access, no state of its own.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Final

from ringmq.core.queue.columns import Columns
from ringmq.storage.pageruns import PageRun
from ringmq.storage.records import (
    HEADER,
    HEADER_SIZE,
    MAX_RECORD,
    PAGE_TYPE_CRC,
    Entry,
    RecordType,
    decode_entry_at,
    decode_paged_ref,
    entry_row_at,
    page_crc,
)

__all__ = ["CorruptPageError", "PeekedRows", "fill_refs", "journal_rows", "peek_rows"]

_PAGED_REF: Final = int(RecordType.PAGED_REF)
_PAGED_RUN: Final = int(RecordType.PAGED_RUN)
_STORE_REF_SIZE: Final = 8  # a PAGED record's payload starts with the message's store ref
_SEQ: Final = struct.Struct("<Q")  # the first field of an encoded entry


class CorruptPageError(Exception):
    """A frame that fails its length or crc check, at `offset` in the data read."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


class PeekedRows:
    """What one `peek_rows` call read: the placeholder rows of PAGED_REF records, as (row
    index in the columns, seq), and the seq of the last record read (-1: none)."""

    __slots__ = ("last_seq", "refs")

    def __init__(self) -> None:
        self.refs: list[tuple[int, int]] = []
        self.last_seq = -1


def peek_rows(
    data: memoryview,
    skip: int,
    low: int,
    tombstones: dict[int, int],
    now_ms: int,
    limit: int,
    out: Columns,
) -> PeekedRows:
    """Append to `out`, until it holds `limit` rows, the records of `data` (page records from
    a record boundary, usually a mapped page file: `PageQueue._view`; the first read from its
    row `skip` when it is a PAGED_RUN) whose seq is above `low`, leaving out tombstoned seqs
    and messages expired at `now_ms` (as a browse skips them). Redelivered flags are 0 (the
    queue knows a paged message's history, the record does not). A PAGED_RUN record goes in
    as blocks (`PageRun.add_columns`): its rows stay views of `data` until the answer is
    joined. Any other record is copied out of `data` and decoded from the copy, so no message
    keeps a view of the mapping.

    Raises:
        CorruptPageError: a frame fails its checks.
    """
    got = PeekedRows()
    refs = got.refs
    end = len(data)
    unpack = HEADER.unpack_from
    crc32c = page_crc
    seq_at = _SEQ.unpack_from
    seqs = out.seqs
    flags = out.redelivered
    stamps = out.timestamps
    exchanges = out.exchanges.rows()
    keys = out.routing_keys.rows()
    props = out.properties.rows()
    bodies = out.bodies.rows()
    n = len(seqs)
    pos = 0
    while pos + HEADER_SIZE <= end and n < limit:
        length, crc, rtype = unpack(data, pos)
        at = pos + HEADER_SIZE
        stop = at + length
        if length > MAX_RECORD or stop > end or crc32c(data[at:stop], PAGE_TYPE_CRC[rtype]) != crc:
            raise CorruptPageError(pos)
        first = pos == 0
        pos = stop
        if rtype == _PAGED_RUN:
            added, last = PageRun(data, at, stop).add_columns(
                skip if first else 0, low, tombstones, limit - n, out
            )
            if added:
                n += added
                got.last_seq = last
                exchanges = out.exchanges.rows()
                keys = out.routing_keys.rows()
                props = out.properties.rows()
                bodies = out.bodies.rows()
            continue
        if rtype == _PAGED_REF:
            seq, _ = decode_paged_ref(data[at:stop])
            got.last_seq = seq
            if seq <= low or seq in tombstones:
                continue
            refs.append((n, seq))
            ts, ex, rk, pb, body = 0, b"", b"", b"", b""
        else:
            at += _STORE_REF_SIZE
            (seq,) = seq_at(data, at)
            got.last_seq = seq
            if seq <= low or seq in tombstones:
                continue
            record = bytes(data[at:stop])
            row = entry_row_at(record, 0, stop - at)
            if row is None:  # another protocol's form: its columns come from the message
                entry = decode_entry_at(record, 0, stop - at)
                exp = entry.expiry_ms
                if exp is None or now_ms <= exp:
                    out.add_rows(((seq, seq, False, entry.message),))
                    n += 1
                continue
            seq, expires_at, ts, ex, rk, pb, body = row
            if expires_at is not None and now_ms > expires_at:
                continue
        seqs.append(seq)
        flags.append(0)
        stamps.append(ts)
        exchanges.append(ex)
        keys.append(rk)
        props.append(pb)
        bodies.append(body)
        n += 1
    return got


def fill_refs(out: Columns, refs: list[tuple[int, int]], entries: list[Entry], now_ms: int) -> None:
    """Fill the placeholder rows `refs` ((row index, seq), as `peek_rows` left them) from
    `entries`, their journal copies in the same order; rows whose message expired at `now_ms`
    are dropped."""
    expired: set[int] = set()
    filled = Columns()
    rows: list[int] = []
    for (i, _), entry in zip(refs, entries, strict=True):
        exp = entry.expiry_ms
        if exp is not None and now_ms > exp:
            expired.add(i)
            continue
        filled.add_message(entry.seq, False, entry.message)
        out.timestamps[i] = filled.timestamps[len(rows)]
        rows.append(i)
    for mine, theirs in zip(out.var_columns(), filled.var_columns(), strict=True):
        mine.set_rows(dict(zip(rows, theirs.values(), strict=True)))
    if expired:
        out.drop_rows(expired)


def journal_rows(
    read: Callable[[Sequence[int]], list[Entry]],
    want: list[int],
    low: int,
    limit: int,
    now_ms: int,
    out: Columns,
) -> int:
    """Append to `out`, until it holds `limit` rows, the journal copies of the seqs `want` (in
    order, read with `read` in chunks) that have not expired at `now_ms`; returns the last seq
    read (`low` when none was)."""
    last = low
    while want and len(out) < limit:
        chunk, want = want[: limit - len(out)], want[limit - len(out) :]
        for entry in read(chunk):
            exp = entry.expiry_ms
            if exp is None or now_ms <= exp:
                out.add_message(entry.seq, False, entry.message)
        last = chunk[-1]
    return last
