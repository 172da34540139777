"""Taking a run of head messages with an ack required in one call (`Queue.take_run`).

Theory of operation
-------------------
An offset reader's reserve (`core.reservations`) takes up to N head messages at once, each as a
delivery with an ack required. `take_run` gives exactly what N chained
`Queue.fetch(now_ms, ack_required=True)` calls give (the same entries in the same order, the
same counters, the same unacked map, the same paging), with a byte budget on top, and hands the
messages over as three parallel lists (seqs, messages, redelivered flags) instead of one
`Delivery` per message.

It is a guard in front of the shared per-message step, not a second copy of the queue's rules:

* The *run step* (`_take_tail`) serves only the common case of `fetch`'s own fast path, which
  `Queue` tests and passes as `fetch_fast` (one lane, no expiry ever seen, destructive): the
  head is the single lane's tail (nothing put back at the lane's head, no requeued message in
  its returns) and the entry's body is in memory. It pops live entries of the tail (gone ones
  are skipped, as `Contents.pop_next` skips them), marks each ACQUIRED with one more delivery
  and puts it in the unacked map, as `fetch` does, and moves the counters once per chunk.
  Before every pop, while something is spilled, it asks the paged tail to read ahead exactly
  when a consumer's pop would (`Contents.read_ahead`, the one rule; the loop only keeps the
  counters in locals and calls it when they reach the low marks), so the paging is the same.
* When the head is in the paged tail, the rows of the page runs at the spill's front are
  taken raw (rawtake.py: kept as page rows in the queue's second unacked table, no message or
  entry built), under rawtake's guard, when the spill store keeps page records
  (`SpillStore.keeps_raw`). The in-memory tail is then drained without a read-ahead (the
  spill follows it in seq order), so the head reaches the spill: a reserve leaves the
  spilled messages it did not take where they were, where N fetches would have paged a
  read-ahead batch in. Order, counts and what each message is are the same; only the split
  of the waiting messages between memory and the spill differs. Over a store that keeps no
  raw rows (`MemorySpillStore`) the run reads ahead exactly as the fetches would.
* Anything else goes through `fetch`, one message at a time: a put-back or requeued message at
  the head, a body paged out on its own (flow-to-disk), a queue off the fetch fast path
  (priorities, TTL or expiring messages, non-destructive). The run step resumes once the head is
  ordinary again.

Byte budget: as the reservations' rule, a message is taken while the bytes taken so far are
below `max_bytes`, and the first one always (a message larger than the budget is not stuck).

Pure and synchronous (no clock: `now_ms` is passed to `fetch`); imports nothing outside
core/queue.
"""

from __future__ import annotations

from collections.abc import Callable

from ringmq.core.message import Message, SeqId
from ringmq.core.queue import rawtake
from ringmq.core.queue.contents import Contents
from ringmq.core.queue.lanes import ACQUIRED, READY
from ringmq.core.queue.ports import RawRows
from ringmq.core.queue.records import UNBOUNDED, Delivery

__all__ = ["take_run"]


def take_run(
    contents: Contents,
    fetch: Callable[[int, bool], Delivery | None],
    fetch_fast: bool,
    max_count: int,
    max_bytes: int | None,
    now_ms: int,
    seqs: list[SeqId],
    messages: list[Message | RawRows],
    redelivered: list[bool],
) -> int:
    """Take up to `max_count` head messages with an ack required (see the module docstring),
    appending them to `seqs`, `messages` (a raw row's `RawRows`, rawtake.py) and
    `redelivered`; returns how many."""
    lane = contents.lane
    paging = contents.paging
    budget = UNBOUNDED if max_bytes is None else max_bytes
    n = nbytes = 0
    while n < max_count and (n == 0 or nbytes < budget):
        if fetch_fast and not (lane.head or lane.returns):
            # The head may reach a spill that can be taken raw: drain the tail, no read-ahead.
            raw = rawtake.spill_raw(paging)
            k, kb = _take_tail(
                contents,
                max_count - n,
                budget - nbytes,
                n > 0,
                not raw,
                seqs,
                messages,
                redelivered,
            )
            n += k
            nbytes += kb
            if raw and n < max_count and (n == 0 or nbytes < budget) and rawtake.ready(contents):
                room = None if max_bytes is None else budget - nbytes
                k2, kb2 = rawtake.take(
                    contents, max_count - n, room, n == 0, seqs, messages, redelivered
                )
                n += k2
                nbytes += kb2
                k += k2
            if k:
                continue
        d = fetch(now_ms, True)  # the head is unusual (or nothing is ready): the shared step
        if d is None:
            break
        seqs.append(d.seq)
        messages.append(d.message)
        redelivered.append(d.redelivered)
        n += 1
        nbytes += len(d.message.body)
    return n


def _take_tail(
    contents: Contents,
    max_count: int,
    budget: int,
    started: bool,
    ahead: bool,
    seqs: list[SeqId],
    messages: list[Message | RawRows],
    redelivered: list[bool],
) -> tuple[int, int]:
    # The run step: `fetch`'s fast path (pop the tail's first live entry, acquire it) for up to
    # `max_count` entries, with the paged tail read ahead as `Contents.pop_next` does (unless
    # not `ahead`: the tail is drained and the caller takes the spill raw). Stops
    # before an entry whose body is paged out on its own (left at the tail's front for
    # `fetch`), and before a message once `budget` bytes are taken (never before the first of
    # the whole run). Returns (messages, bytes) taken.
    c = contents.counters
    paging = contents.paging
    unacked = contents.unacked
    low_n, low_b = paging.low_n, paging.low_b
    k = kb = reds = 0
    while True:
        # One chunk: from here to the next read-ahead point (or the end of the run). A pop
        # reads ahead first, so only when another pop follows (the byte budget allows it).
        if (k or started) and kb >= budget:
            return k, kb
        if ahead and paging.spilled:
            contents.read_ahead()
        spilled = ahead and paging.spilled
        tail = contents.lane.tail  # re-read: a compaction rebinds it
        ready, ready_b = c.ready, c.ready_bytes
        k0, kb0, reds0 = k, kb, reds
        stop = False
        while k < max_count and tail:
            e = tail.popleft()
            if e.state != READY:
                continue  # gone (evicted, replaced, taken from the middle): skipped lazily
            msg = e.msg
            if e.paged or msg is None or ((k or started) and kb >= budget):
                tail.appendleft(e)
                stop = True
                break
            size = e.size
            e.state = ACQUIRED
            e.deliveries += 1
            seq = e.seq
            unacked[seq] = e
            seqs.append(seq)
            messages.append(msg)
            if e.redelivered:
                reds += 1
                redelivered.append(True)
            else:
                redelivered.append(False)
            k += 1
            kb += size
            ready -= 1
            ready_b -= size
            if spilled and ready <= low_n and ready_b <= low_b:
                break  # the next pop may read ahead: `read_ahead` decides, in the next chunk
        taken, taken_b = k - k0, kb - kb0
        c.ready -= taken
        c.ready_bytes -= taken_b
        c.delivered += taken
        c.redelivered += reds - reds0
        c.unacked_bytes += taken_b
        if stop or k >= max_count or not spilled or (not taken and not tail):
            return k, kb  # done, nothing more to page in, or paging in gave nothing
