"""A deliberately naive reference model of one queue (lists and dicts, no laziness, no heaps).

It restates docs/semantics.md as directly as possible so that the Hypothesis machines in
test_queue_machines.py can compare the engine against it step by step. It supports one lane
(no priorities): ring, drop-head, reject-publish(-dlx), Qpid ring / ring_strict / reject, LVQ,
scheduled messages, TTL, dead-lettering and the delivery limit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Item:
    seq: int
    body: bytes
    key: Any = None
    ttl: int | None = None  # per-message TTL
    expires: int | None = None
    redelivered: bool = False
    deliveries: int = 0
    failures: int = 0
    at_head: bool = False  # put back at the head (ring return, scheduled release)
    due: int = 0
    level: int = 0  # priority level (0 without x-max-priority)

    @property
    def size(self) -> int:
        return len(self.body)


@dataclass
class ModelConfig:
    action: str | None = None  # ring, drop-head, reject-publish, reject-publish-dlx,
    # qpid-ring, qpid-ring-strict, qpid-reject
    max_count: int | None = None
    max_bytes: int | None = None
    lvq: bool = False
    ttl: int | None = None
    dlx: bool = False
    delivery_limit: int | None = None
    max_priority: int = 0

    @property
    def counts_acquired(self) -> bool:
        return self.action is not None and self.action.startswith("qpid")


@dataclass
class ModelQueue:
    cfg: ModelConfig
    ready: list[Item] = field(default_factory=list)
    unacked: dict[int, Item] = field(default_factory=dict)
    scheduled: list[Item] = field(default_factory=list)
    lvq: dict[Any, Item] = field(default_factory=dict)
    dead: list[tuple[bytes, str]] = field(default_factory=list)
    seq: int = 0
    ring_evicted: int = 0
    lvq_replaced: int = 0
    overflow_rejected: int = 0
    expired: int = 0
    maxlen_dropped: int = 0
    acknowledged: int = 0

    # --- helpers ---------------------------------------------------------------------------

    def _counted(self) -> tuple[int, int]:
        items = list(self.ready)
        if self.cfg.counts_acquired:
            items += list(self.unacked.values())
        return len(items), sum(i.size for i in items)

    def _over(self, extra_n: int = 0, extra_b: int = 0) -> bool:
        n, b = self._counted()
        c = self.cfg
        return (c.max_count is not None and n + extra_n > c.max_count) or (
            c.max_bytes is not None and b + extra_b > c.max_bytes
        )

    def _die(self, item: Item, reason: str) -> None:
        if self.cfg.dlx:
            self.dead.append((item.body, reason))

    def _forget(self, item: Item) -> None:
        if item.key is not None and self.lvq.get(item.key) is item:
            del self.lvq[item.key]

    def _insert_by_seq(self, item: Item) -> None:
        i = 0
        while i < len(self.ready) and self.ready[i].at_head:
            i += 1
        while i < len(self.ready) and self.ready[i].seq < item.seq:
            i += 1
        self.ready.insert(i, item)

    def _pop_head(self) -> Item:
        # The next delivery: the first item of the highest priority level present.
        top = max(i.level for i in self.ready)
        index = next(n for n, i in enumerate(self.ready) if i.level == top)
        return self.ready.pop(index)

    def _drop_head(self) -> None:
        item = self._pop_head()
        self._forget(item)
        self.maxlen_dropped += 1
        self._die(item, "maxlen")

    def _ring_evict_head(self) -> None:
        item = self._pop_head()
        self._forget(item)
        self.ring_evicted += 1

    # --- operations -------------------------------------------------------------------------

    def publish(
        self, body: bytes, key: Any, delay: int, ttl: int | None, now: int, priority: int = 0
    ) -> str:
        self.seq += 1
        item = Item(self.seq, body, key if self.cfg.lvq else None, ttl)
        item.level = min(priority, self.cfg.max_priority)
        if delay > 0:
            item.due = now + delay
            self.scheduled.append(item)
            return "scheduled"
        return self._admit(item, now, head=False)

    def _admit(self, item: Item, now: int, head: bool) -> str:
        ttls = [t for t in (self.cfg.ttl, item.ttl) if t is not None]
        item.expires = now + min(ttls) if ttls else None
        action = self.cfg.action
        old = self.lvq.get(item.key) if item.key is not None else None
        replaced = old if old is not None and old in self.ready else None
        free_n, free_b = (1, replaced.size) if replaced else (0, 0)
        if action in ("reject-publish", "reject-publish-dlx", "qpid-reject") and self._over(
            1 - free_n, item.size - free_b
        ):
            self.overflow_rejected += 1
            if action == "reject-publish-dlx":
                self._die(item, "maxlen")
            return "rejected"
        if (
            action in ("qpid-ring", "qpid-ring-strict")
            and self.cfg.max_bytes is not None
            and item.size > self.cfg.max_bytes
        ):
            self.overflow_rejected += 1
            return "rejected"
        if replaced is not None:
            self.ready.remove(replaced)
            self._forget(replaced)
            self.lvq_replaced += 1
        if item.key is not None:
            self.lvq[item.key] = item
        if action in ("qpid-ring", "qpid-ring-strict") and self._over(1, item.size):
            while True:
                candidates = self.ready + list(self.unacked.values())
                if not candidates:
                    break
                oldest = min(candidates, key=lambda i: (i.level, i.seq))
                if oldest.seq in self.unacked:
                    if action == "qpid-ring-strict":
                        self._forget(item)
                        self.overflow_rejected += 1
                        return "rejected"
                    del self.unacked[oldest.seq]
                else:
                    self.ready.remove(oldest)
                self._forget(oldest)
                self.ring_evicted += 1
                self._die(oldest, "maxlen")
                if self.cfg.max_bytes is None or not self._over(0, item.size):
                    break
        if head:
            item.at_head = True
            self.ready.insert(0, item)
        else:
            self.ready.append(item)
        if action == "ring" and self._over():
            self._ring_evict_head()
        elif action == "drop-head":
            while self._over():
                self._drop_head()
        return "enqueued" if item in self.ready else "dropped"

    def fetch(self, now: int, ack_required: bool = True) -> tuple[int, bytes, bool, int] | None:
        while self.ready:
            item = self._pop_head()
            item.at_head = False
            if item.expires is not None and now > item.expires:
                self._forget(item)
                self.expired += 1
                self._die(item, "expired")
                continue
            item.deliveries += 1
            if ack_required:
                self.unacked[item.seq] = item
            else:
                self._forget(item)
                self.acknowledged += 1
            return (item.seq, item.body, item.redelivered, item.deliveries)
        return None

    def ack(self, seqs: list[int]) -> None:
        for s in seqs:
            item = self.unacked.pop(s, None)
            if item is not None:
                self._forget(item)
                self.acknowledged += 1

    def reject(self, seqs: list[int]) -> None:
        for s in seqs:
            item = self.unacked.pop(s, None)
            if item is not None:
                self._forget(item)
                self._die(item, "rejected")

    def requeue(self, seqs: list[int], count_failure: bool = True) -> None:
        items = [self.unacked.pop(s) for s in seqs if s in self.unacked]
        ring = self.cfg.action == "ring"
        for item in reversed(items) if ring else items:
            if count_failure:
                item.failures += 1
                limit = self.cfg.delivery_limit
                if limit is not None and item.failures > limit:
                    self._forget(item)
                    self._die(item, "delivery_limit")
                    continue
            if item.key is not None:
                current = self.lvq.get(item.key)
                if current is not None and current is not item:
                    self.lvq_replaced += 1
                    continue
                if current is item:
                    del self.lvq[item.key]
            item.redelivered = True
            if ring:
                item.at_head = True
                self.ready.insert(0, item)
                if self._over():
                    self._ring_evict_head()
            else:
                self._insert_by_seq(item)
        if self.cfg.action == "drop-head":
            while self._over():
                self._drop_head()

    def tick(self, now: int) -> None:
        due = sorted((i for i in self.scheduled if i.due <= now), key=lambda i: (i.due, i.seq))
        for item in due:
            self.scheduled.remove(item)
            self._admit(item, now, head=True)
        self._expire_head(lambda expires: now > expires)

    def drop_expired(self, now: int) -> None:
        """RabbitMQ's drop_expired_msgs: expiry reached (`now >= expires`), at the head only."""
        self._expire_head(lambda expires: now >= expires)

    def _expire_head(self, expired: Callable[[int], bool]) -> None:
        # Only the head of the whole queue (the next delivery) expires, never behind it.
        while self.ready:
            top = max(i.level for i in self.ready)
            head = next(i for i in self.ready if i.level == top)
            if head.expires is None or not expired(head.expires):
                break
            self.ready.remove(head)
            self._forget(head)
            self.expired += 1
            self._die(head, "expired")

    def resize(self, max_count: int | None) -> None:
        self.cfg.max_count = max_count
        if self.cfg.action == "drop-head":
            while self._over():
                self._drop_head()

    def purge(self) -> int:
        n = len(self.ready)
        for item in self.ready:
            self._forget(item)
        self.ready.clear()
        return n

    def delivery_order(self) -> list[Item]:
        # Highest level first; within a level, list order (head returns, then by seq).
        levels = sorted({i.level for i in self.ready}, reverse=True)
        return [i for level in levels for i in self.ready if i.level == level]

    def snapshot(self) -> dict[str, Any]:
        return {
            "ready": [(i.seq, i.body, i.redelivered) for i in self.delivery_order()],
            "unacked": sorted(self.unacked),
            "scheduled": sorted(i.seq for i in self.scheduled),
            "ready_bytes": sum(i.size for i in self.ready),
            "ring_evicted": self.ring_evicted,
            "lvq_replaced": self.lvq_replaced,
            "overflow_rejected": self.overflow_rejected,
            "expired": self.expired,
            "maxlen_dropped": self.maxlen_dropped,
            "acknowledged": self.acknowledged,
        }
