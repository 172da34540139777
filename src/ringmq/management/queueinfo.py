"""Queue records read straight from the engine: the listing path of `admin.CoreAdmin`.

Theory of operation: `/api/queues`, the rate sampler and `/metrics` read every queue on every
call, so their records are built from the engine's O(1) counters (`Queue.counters`, the
entity's AMQP-level totals, its resolved `QueueSettings`) and never walk the ready messages.
The counters are kept by the queue as messages move (paging moves `ready` into `paged` and
back); `messages_paged` leaves out the few the paged tail still buffers in memory
(`Queue.paged_in_memory`), so it and the in-memory figures derived from it
(`messages_ram`, `message_bytes_ram`) are what disk and memory hold.
The full record of one queue (`snapshot_record`) adds the head message's timestamp and the
exclusive owner's address, for GET of one queue only. The head is read in place
(`Queue.head_message`: the paged tail's front is read where it lies, never paged in), so the
queue page, which the console polls, costs the same and leaves memory as it found it at any
depth; `tests/management/test_admin.py` checks that both records agree.

Settings objects are frozen and replaced when they change, so `SettingsView` renders each one
once and keeps the rendering keyed by identity, bounded by the number of live queues.
Everything here reads; nothing changes the broker.
"""

from __future__ import annotations

from dataclasses import asdict, fields, is_dataclass, replace
from typing import Any

from ringmq.core.entities import QueueEntity
from ringmq.core.settings import QueueSettings
from ringmq.management.records import QueueCounters, QueueInfo


def _json_value(v: Any) -> Any:
    # enums by their value's text; a nested settings value (`Redelivery`) as its fields
    if hasattr(v, "value"):
        return str(v)
    if is_dataclass(v) and not isinstance(v, type):
        return asdict(v)
    return v


class SettingsView:
    """`QueueInfo.effective_settings` of a `QueueSettings`: JSON values, with `sources`."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[QueueSettings, dict[str, Any]]] = {}
        self.live_queues = 0
        """How many queues the last listing held (bounds the cache)."""

    def render(self, settings: QueueSettings) -> dict[str, Any]:
        hit = self._cache.get(id(settings))
        if hit is not None and hit[0] is settings:
            return hit[1]
        out: dict[str, Any] = {
            f.name: _json_value(v)
            for f in fields(settings)
            if (v := getattr(settings, f.name)) is not None and f.name not in ("sources", "limit")
        }
        limit = settings.limit
        if limit is not None:
            out["limit"] = {
                "family": limit.family,
                "counts": str(limit.counts),
                "max_count": limit.max_count,
                "max_bytes": limit.max_bytes,
                "action": str(limit.action),
            }
        out["sources"] = dict(settings.sources)
        if len(self._cache) > 4 * (self.live_queues + 64):
            self._cache.clear()
        self._cache[id(settings)] = (settings, out)
        return out


def listing_record(q: QueueEntity, settings: dict[str, Any], persistent: int) -> QueueInfo:
    """A listing record from the engine's counters (`settings`: `SettingsView.render`;
    `persistent`: the queue's journaled live messages)."""
    c = q.queue.counters
    st = q.settings
    # what the paged tail still buffers is counted paged by the queue but held in memory
    buffered, buffered_bytes = q.queue.paged_in_memory
    info = QueueInfo(
        vhost=q.vhost,
        name=q.name,
        durable=q.durable,
        auto_delete=q.auto_delete,
        exclusive=q.exclusive_owner is not None,
        arguments=q.arguments,
        policy=st.policy_name,
        effective_settings=settings,
        messages_ready=c.ready + c.paged,
        messages_unacknowledged=c.unacked,
        messages_scheduled=c.scheduled,
        messages_paged=c.paged - buffered,
        message_bytes_ready=c.ready_bytes + c.paged_bytes,
        message_bytes_unacknowledged=c.unacked_bytes,
        message_bytes_scheduled=c.scheduled_bytes,
        message_bytes_paged=c.paged_bytes - buffered_bytes,
        messages_persistent=persistent,
        consumers=len(q.consumers),
        ring_size=st.ring_size,
        type=st.queue_type,
        shard=q.shard,
        counters=QueueCounters(
            publish=c.added + c.overflow_rejected,
            deliver=q.deliver,
            deliver_no_ack=q.deliver_no_ack,
            get=q.get,
            get_no_ack=q.get_no_ack,
            get_empty=q.get_empty,
            redeliver=c.redelivered,
            ack=c.acknowledged,
            ring_evicted=c.ring_evicted,
            lvq_replaced=c.lvq_replaced,
            overflow_rejected=c.overflow_rejected,
            expired=c.expired,
            dead_lettered=c.dead_lettered,
        ),
        exclusive_owner=None if q.exclusive_owner is None else str(q.exclusive_owner),
    )
    log = q.stream
    if log is not None:  # a stream's messages live in its log (RabbitMQ counts them ready)
        index = log.index
        end = log.end  # what readers may see: a cluster leader's committed reads stop there
        info.type = "stream"
        info.messages_ready = index.count - (index.next_offset - end)
        info.message_bytes_ready = index.nbytes
        info.stream = {
            "first_offset": index.first_offset,
            "last_offset": end - 1,
            "next_offset": end,
            "size_bytes": index.nbytes,
            "segments": len(index.segments),
        }
    return info


def snapshot_record(
    q: QueueEntity, settings: dict[str, Any], persistent: int, owner: str | None
) -> QueueInfo:
    """One queue's full record: the listing's, with the head message's timestamp (read in
    place, `Queue.head_message`) and the exclusive owner's peer address (`owner`)."""
    head = q.queue.head_message()
    return replace(
        listing_record(q, settings, persistent),
        head_message_timestamp_ms=head.timestamp_ms if head is not None else None,
        exclusive_owner=owner,
    )


def stream_bounds(q: QueueEntity, *, head: bool = False) -> dict[str, Any]:
    """Where a queue's positions stand, as the streams API reports them.

    `head_seq` scans what is in memory (lanes, unacked), so only the info endpoint asks for it.
    """
    engine = q.queue
    c = engine.counters
    out: dict[str, Any] = {}
    if head:
        # The lowest live seq: the first ready message in seq order, or the oldest unacked one
        # (without building the browse index, which would page the whole queue in for good).
        seq = engine.head_seq()
        out["head_seq"] = None if seq is None else int(seq)
    out.update(
        {
            "tail_seq": int(engine.last_seq),  # seqs have gaps: `added` is a count, not a seq
            "ready": engine.ready_count,
            "unacked": engine.unacked_count,
            "messages": engine.message_count,
            "evicted": {
                "ring_evicted": c.ring_evicted,
                "lvq_replaced": c.lvq_replaced,
                "expired": c.expired,
                "maxlen_dropped": c.maxlen_dropped,
                "overflow_dropped": c.overflow_dropped,
                "purged": c.purged,
            },
        }
    )
    return out
