"""The `FileStore`'s in-memory index of live journal entries, and its recovery terms.

Theory of operation
-------------------
`StoreIndex` owns what the store knows about the journal without reading it:

* per queue, each live message's *location* ``segment << 64 | offset << 32 | body size`` (no
  message is kept in memory; readers go back to the journal, see `reader.py`), and beside it
  only what is not the default: delivery counts (> 0), shared-body refs (large bodies in the
  `MessageStore`) and due times (scheduled messages, and delayed redeliveries: a
  DELIVERY_COUNT record sets or ends one, `records.encode_delivery`);
* per queue, the first seq the engine may use (`next_seq`) and whether any message ever carried
  an expiry (`expiring`);
* per journal segment, the accounting that space reclamation reads: ENQUEUE records written
  (`seg_total`) and still live (`seg_live`), the flush count of its last ack (`seg_acked_at`),
  the older segments it must not outlive (`seg_deps`: an ACK, PURGE, DELIVERY_COUNT or
  TX_COMMIT must never disappear before the record it cancels or completes) and the segments
  copied forward (`moved`, with the position that makes the old copy dead).

Invariants: a seq is in `locations[queue]` iff its latest ENQUEUE is live (no later ACK or
PURGE); `refs`, `counts` and `due` only hold live seqs; `seg_live[s]` is the number of
locations that point into segment `s`. Forgetting a seq releases its shared body (`decref`).

The index is rebuilt at open either by replaying the journal (`replay.py`) or, after a clean
stop, from the recovery terms written by `save_terms` (`terms.py` is the file format):
`load_terms` adopts them only if they are intact and describe exactly the files on disk.

Mutated only by its `FileStore` (and `replay.py` at open): through the methods here, except
on the publish hot path, where `FileStore.enqueue` writes a new entry's fields inline and
`flush` advances `flushes` (the clock of `seg_acked_at`); see the comment there.
One owner thread (the store's); file I/O only through `terms`, `Journal` and `MessageStore`.
"""

from __future__ import annotations

import logging
from array import array
from pathlib import Path
from typing import Any, Final

from ringmq.storage import terms
from ringmq.storage.journal import Journal
from ringmq.storage.msgstore import MessageStore

log = logging.getLogger(__name__)

SIZE_MASK: Final = 0xFFFFFFFF
"""Locations are ``segment << 64 | offset << 32 | body size``: the low and middle 32 bits."""
_TERMS_FIELDS: Final = frozenset(
    (
        "journal", "msgstore", "seg_total", "seg_live", "seg_deps", "moved", "next_seq",
        "expiring", "queues", "bodies",
    )
)  # fmt: skip


class StoreIndex:
    """Where each live entry of each queue is, and each segment's accounting (module doc)."""

    __slots__ = (
        "bodies",
        "counts",
        "due",
        "expiring",
        "flushes",
        "locations",
        "moved",
        "next_seq",
        "refs",
        "seg_acked_at",
        "seg_deps",
        "seg_live",
        "seg_total",
    )

    def __init__(self, bodies: MessageStore) -> None:
        self.bodies = bodies
        # queue -> seq -> location of its live ENQUEUE: segment << 64 | offset << 32 | body size
        self.locations: dict[str, dict[int, int]] = {}
        self.due: dict[str, dict[int, int]] = {}  # queue -> seq -> due_ms (waiting ones only)
        self.refs: dict[str, dict[int, int]] = {}  # queue -> seq -> shared-store ref
        self.counts: dict[str, dict[int, int]] = {}  # queue -> seq -> delivery count (> 0)
        self.expiring: set[str] = set()  # queues that journaled a message with an expiry
        self.next_seq: dict[str, int] = {}
        self.seg_live: dict[int, int] = {}
        self.seg_total: dict[int, int] = {}  # ENQUEUE records written to each segment
        self.seg_acked_at: dict[int, int] = {}  # segment -> flush count of its last ack
        self.seg_deps: dict[int, set[int]] = {}  # seg -> older segs it must not outlive
        self.moved: dict[int, int] = {}  # seg copied forward -> position that makes it dead
        self.flushes = 0

    # -- entries -----------------------------------------------------------------------------

    def forget(self, queue: str, seq: int) -> int | None:
        """Drop a live entry (its shared body released); returns its segment, None if unknown."""
        qindex = self.locations.get(queue)
        if qindex is None:
            return None
        loc = qindex.pop(seq, None)
        if loc is None:
            return None
        seg: int = loc >> 64
        self.seg_live[seg] -= 1
        self.seg_acked_at[seg] = self.flushes
        qrefs = self.refs.get(queue)
        if qrefs:
            ref = qrefs.pop(seq, None)
            if ref is not None:
                self.bodies.decref(ref)
        qcounts = self.counts.get(queue)
        if qcounts:
            qcounts.pop(seq, None)
        qdue = self.due.get(queue)
        if qdue:
            qdue.pop(seq, None)
        return seg

    def forget_queue(self, queue: str) -> set[int]:
        """Drop every live entry of `queue`; returns the segments they were in."""
        segs = [self.forget(queue, seq) for seq in list(self.locations.get(queue, ()))]
        self.locations.pop(queue, None)
        self.refs.pop(queue, None)
        self.counts.pop(queue, None)
        self.due.pop(queue, None)
        return {s for s in segs if s is not None}

    def set_count(
        self, queue: str, seq: int, delivery_count: int, due_ms: int | None = None
    ) -> int | None:
        """Record a delivery count of a live seq and the due time it waits for from now on
        (a delayed redelivery's; None: it waits for nothing, any earlier due time is over);
        returns its segment (None: not live)."""
        loc = self.locations.get(queue, {}).get(seq)
        if loc is None:
            return None
        self.counts.setdefault(queue, {})[seq] = delivery_count
        if due_ms is not None:
            self.due.setdefault(queue, {})[seq] = due_ms
        else:
            qdue = self.due.get(queue)
            if qdue:
                qdue.pop(seq, None)
        return int(loc >> 64)

    def holds(self, queue: str, seq: int) -> bool:
        """True when `seq` of `queue` is live."""
        qi = self.locations.get(queue)
        return qi is not None and seq in qi

    def size(self, queue: str, seq: int) -> int:
        """Body size of a live entry (KeyError when not live)."""
        return int(self.locations[queue][seq] & SIZE_MASK)

    def depend(self, seg: int, older: int) -> None:
        """Segment `seg` holds a record that must not outlive segment `older`."""
        if older != seg:
            self.seg_deps.setdefault(seg, set()).add(older)

    def relocate(self, queue: str, seq: int, old: int, new: int, offset: int) -> None:
        """A live entry was copied forward from segment `old` to `new` at `offset`."""
        loc = self.locations[queue][seq]
        self.locations[queue][seq] = (new << 64) | (offset << 32) | (loc & SIZE_MASK)
        seg_live = self.seg_live
        seg_live[old] -= 1
        seg_live[new] = seg_live.get(new, 0) + 1
        self.seg_total[new] = self.seg_total.get(new, 0) + 1
        self.depend(new, old)

    def moved_at(self, seg: int, position: int) -> None:
        """Segment `seg` was copied forward; it is dead once `position` is durable."""
        self.moved[seg] = position

    def dropped_segment(self, seg: int) -> None:
        """Segment `seg` was deleted: forget its accounting."""
        self.seg_live.pop(seg, None)
        self.seg_total.pop(seg, None)
        self.seg_acked_at.pop(seg, None)
        self.seg_deps.pop(seg, None)
        self.moved.pop(seg, None)

    def message_count(self) -> int:
        """Live entries over all queues."""
        return sum(len(q) for q in self.locations.values())

    # -- recovery terms (clean stop) ---------------------------------------------------------

    def save_terms(self, directory: Path, journal: Journal) -> None:
        """Write everything a replay would rebuild, as flat columns (`terms.py`)."""
        cols: list[array[Any]] = []
        queues = []
        for q, qi in self.locations.items():
            if not qi:
                continue
            seqs = sorted(qi)
            locs = [qi[s] for s in seqs]
            cols.append(array("Q", seqs))
            cols.append(array("Q", [loc >> 32 for loc in locs]))  # segment << 32 | offset
            cols.append(array("L", [loc & SIZE_MASK for loc in locs]))
            qc = self.counts.get(q, {})
            cols.append(array("Q", qc.keys()))
            cols.append(array("L", qc.values()))
            qr = self.refs.get(q, {})
            cols.append(array("Q", qr.keys()))
            cols.append(array("Q", qr.values()))
            qd = self.due.get(q, {})
            cols.append(array("Q", qd.keys()))
            cols.append(array("q", qd.values()))
            queues.append(q)
        bodies = self.bodies
        cols.extend(bodies.export())
        meta = {
            "journal": {str(k): v for k, v in journal.sizes().items()},
            "msgstore": {str(k): v for k, v in bodies.journal.sizes().items()},
            "seg_total": {str(k): v for k, v in self.seg_total.items()},
            "seg_live": {str(k): v for k, v in self.seg_live.items() if v},
            "seg_deps": {str(k): sorted(v) for k, v in self.seg_deps.items() if v},
            "moved": sorted(self.moved),
            "next_seq": self.next_seq,
            "expiring": sorted(self.expiring),
            "queues": queues,
            "bodies": bodies.export_meta(),
        }
        terms.write(directory, meta, cols)

    def load_terms(self, directory: Path, journal: Journal) -> bool:
        """Rebuild the index from the recovery terms of a clean stop, if (and only if) they are
        intact and describe exactly the files on disk; False (logged) when a replay is needed."""
        bodies = self.bodies
        got = terms.read(directory)
        reason = got if isinstance(got, str) else None
        if not isinstance(got, str):
            meta, cols = got
            if not meta.keys() >= _TERMS_FIELDS:
                reason = "recovery terms: fields missing"
            elif {str(k): v for k, v in journal.sizes().items()} != meta["journal"]:
                reason = "journal segments differ from the recovery terms"
            elif {str(k): v for k, v in bodies.journal.sizes().items()} != meta["msgstore"]:
                reason = "message store files differ from the recovery terms"
            elif len(cols) != 9 * len(meta["queues"]) + 5:
                reason = "recovery terms: unexpected columns"
        if reason is not None:
            log.warning("store %s: %s; replaying the journal", directory, reason)
            return False
        journal.adopt()
        bodies.journal.adopt()
        it = iter(cols)
        for q in meta["queues"]:
            seqs, segoffs, sizes = next(it), next(it), next(it)
            self.locations[q] = dict(
                zip(
                    seqs,
                    [(so << 32) | z for so, z in zip(segoffs, sizes, strict=True)],
                    strict=True,
                )
            )
            for target in (self.counts, self.refs, self.due):
                keys, values = next(it), next(it)
                if keys:
                    target[q] = dict(zip(keys, values, strict=True))
        bodies.adopt(meta["bodies"], [next(it) for _ in range(5)])
        self.seg_total = {int(k): v for k, v in meta["seg_total"].items()}
        self.seg_deps = {int(k): set(v) for k, v in meta["seg_deps"].items()}
        self.moved = dict.fromkeys(meta["moved"], 0)
        self.next_seq = {str(k): int(v) for k, v in meta["next_seq"].items()}
        self.expiring = set(meta["expiring"])
        self.seg_live = {int(k): v for k, v in meta["seg_live"].items()}
        return True
