"""Journal replay: rebuild a `StoreIndex` from the journal after a dirty stop.

Theory of operation
-------------------
`replay(journal, bodies, index, directory)` reads every segment in order and applies each
record to the index, decoding only record headers (`records.entry_head`): no message is
decoded or kept in memory (bodies are read back lazily, `reader.py`).

* ENQUEUE adds (or replaces) a location; ACK and PURGE remove live seqs; DELIVERY_COUNT sets a
  count and the due time the message waits for from then on (a delayed redelivery's, or none:
  `records.encode_delivery`), as an ENQUEUE's `F_DUE` sets a scheduled message's. Each
  removal or count makes its segment depend on the segment of the ENQUEUE it touches
  (`StoreIndex.depend`), so reclamation never deletes them out of order.
* TX_BEGIN ... TX_COMMIT is applied whole at the COMMIT. A BEGIN followed by another BEGIN
  cannot happen (one writer, contiguous transactions): the older one is treated as committed,
  never dropped. A journal that ends inside a transaction (crash before TX_COMMIT) has that
  transaction cut off the disk, so records appended after this start can never be mistaken
  for its continuation.
* Shared bodies: every surviving ref is `incref`ed in the message store and the entry learns
  its body size; an entry whose body never reached the disk was never confirmed and is
  dropped (logged). Then `MessageStore.sweep` forgets unreferenced bodies.

The caller owns the index and the files; this module keeps no state.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

from ringmq.storage.index import SIZE_MASK, StoreIndex
from ringmq.storage.journal import Journal
from ringmq.storage.msgstore import MessageStore
from ringmq.storage.records import (
    F_EXPIRY,
    Record,
    RecordType,
    decode_ack,
    decode_delivery,
    decode_purge,
    entry_head,
)

log = logging.getLogger(__name__)


def replay(journal: Journal, bodies: MessageStore, index: StoreIndex, directory: Path) -> None:
    """Index every live entry of `journal` into the empty `index` (see the module doc)."""
    bodies.replay()
    locations = index.locations
    counts = index.counts
    refs = index.refs
    due = index.due
    seg_total = index.seg_total
    next_seq = index.next_seq
    expiring = index.expiring
    depend = index.depend
    names: dict[bytes, str] = {}
    tx: list[tuple[int, Record]] | None = None
    tx_start: tuple[int, int] | None = None

    def enqueue(seg: int, rec: Record) -> None:
        qb, seq, flags, count, due_ms, ref, size = entry_head(rec.payload)
        q = names.get(qb)
        if q is None:
            q = names[qb] = qb.decode()
        qi = locations.get(q)
        if qi is None:
            qi = locations[q] = {}
        qi[seq] = (seg << 64) | (rec.offset << 32) | (size & SIZE_MASK)
        seg_total[seg] = seg_total.get(seg, 0) + 1
        if ref:
            # never hand out a ref the journal mentions, even one whose body was lost
            bodies.reserve_refs_below(ref + 1)
            refs.setdefault(q, {})[seq] = ref
        elif q in refs:
            refs[q].pop(seq, None)
        if count:
            counts.setdefault(q, {})[seq] = count
        elif q in counts:
            counts[q].pop(seq, None)
        if due_ms is not None:
            due.setdefault(q, {})[seq] = due_ms
        elif q in due:
            due[q].pop(seq, None)
        if flags & F_EXPIRY:
            expiring.add(q)
        if seq >= next_seq.get(q, 0):
            next_seq[q] = seq + 1

    def drop(seg: int, q: str, qi: dict[int, int], seqs: Iterable[int]) -> None:
        qr, qc, qd = refs.get(q), counts.get(q), due.get(q)
        for s in seqs:
            loc = qi.pop(s, None)
            if loc is None:
                continue
            depend(seg, loc >> 64)
            if qr:
                qr.pop(s, None)
            if qc:
                qc.pop(s, None)
            if qd:
                qd.pop(s, None)

    def apply(seg: int, rec: Record) -> None:
        rtype = rec.rtype
        if rtype == RecordType.ENQUEUE:
            enqueue(seg, rec)
        elif rtype == RecordType.ACK:
            q, seqs = decode_ack(rec.payload)
            qi = locations.get(q)
            if qi:
                drop(seg, q, qi, seqs)
        elif rtype == RecordType.DELIVERY_COUNT:
            q, s, count, due_ms = decode_delivery(rec.payload)
            qi = locations.get(q)
            loc = qi.get(s) if qi else None
            if loc is not None:
                counts.setdefault(q, {})[s] = count
                if due_ms is not None:
                    due.setdefault(q, {})[s] = due_ms
                elif q in due:
                    due[q].pop(s, None)
                depend(seg, loc >> 64)
        elif rtype == RecordType.PURGE:
            q, upto = decode_purge(rec.payload)
            qi = locations.get(q)
            if qi:
                drop(seg, q, qi, [s for s in qi if s <= upto])

    enqueue_type = RecordType.ENQUEUE
    for seg, rec in journal.replay():
        rtype = rec.rtype
        if rtype == enqueue_type and tx is None:
            enqueue(seg, rec)
        elif rtype == RecordType.TX_BEGIN:
            # a BEGIN without COMMIT followed by another BEGIN: apply the older (module doc)
            if tx is not None:
                for s, r in tx:
                    apply(s, r)
            tx, tx_start = [], (seg, rec.offset)
        elif rtype == RecordType.TX_COMMIT:
            if tx is not None and tx_start is not None:
                for s, r in tx:
                    apply(s, r)
                depend(seg, tx_start[0])
            tx, tx_start = None, None
        elif tx is not None:
            tx.append((seg, rec))
        else:
            apply(seg, rec)
    if tx is not None and tx_start is not None:
        _cut_torn_tx(journal, *tx_start, len(tx))

    # shared bodies: rebuild refcounts, learn the body sizes, drop entries without a body
    lost = 0
    for q, qr in refs.items():
        qi = locations[q]
        for seq, ref in list(qr.items()):
            if bodies.incref(ref):
                loc = qi[seq]
                qi[seq] = (loc & ~SIZE_MASK) | (bodies.length(ref) & SIZE_MASK)
            else:
                # the body never reached the disk: the enqueue was not confirmed
                lost += 1
                del qi[seq], qr[seq]
                counts.get(q, {}).pop(seq, None)
                due.get(q, {}).pop(seq, None)
    if lost:
        log.warning("store %s: %d enqueues without their body were dropped", directory, lost)
    bodies.sweep()
    seg_live = index.seg_live
    for qi in locations.values():
        for loc in qi.values():
            seg = loc >> 64
            seg_live[seg] = seg_live.get(seg, 0) + 1


def _cut_torn_tx(journal: Journal, seg: int, offset: int, n_records: int) -> None:
    # The journal ends inside a transaction (crash before TX_COMMIT): cut it off the disk so
    # that records appended after this start can never be mistaken for its continuation.
    log.warning(
        "journal: dropping an uncommitted transaction of %d records at segment %d offset %d",
        n_records,
        seg,
        offset,
    )
    os.truncate(journal.path(seg), offset)
    for later in [s for s in journal.segments if s > seg]:
        journal.delete(later)
