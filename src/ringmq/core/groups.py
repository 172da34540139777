"""Message groups: which consumer of a queue owns each group (Artemis' message grouping).

Theory of operation
-------------------
A message carrying a group id (`JMSXGroupID`, or Artemis' core name `_AMQ_GROUP_ID`, among
its neutral headers: a 0-9-1 or STOMP header, an MQTT 5 user property, an AMQP 1.0
application property or the properties section's `group-id`, which the 1.0 adapter adds as
`JMSXGroupID`) belongs to that group. Artemis' rule, kept here: every message of a group goes
to one consumer, the group's *owner*. A group has no owner until one of its messages is
delivered; the consumer that takes it becomes the owner. A consumer that is not the owner never
takes the group's messages: they wait for the owner (while it has no capacity the queue serves
other groups' messages past them, so one busy group does not stall the queue). The owner stays
until

* it leaves (cancel, channel or connection closed): its groups lose their owner, and the next
  consumer that takes one of their messages (typically the requeued ones, back in their place)
  owns it;
* a message with a negative `JMSXGroupSeq` (`-1`, Artemis' "close the group"; an AMQP 1.0
  `group-sequence` of 2^31 or more reads as a negative 32-bit int, as Artemis reads it) is
  delivered: it goes to the owner, then the group has none (a sequence of 0, which is what a
  message without one reads as, closes nothing);
* with `group-rebalance`, any consumer joins: every group loses its owner, so the groups spread
  over the new set of consumers as their next messages are delivered;
* an operator resets the group (or all of them) through the management API.

Requeue and rollback do not move a group (its owner is still there and takes the message
again); ring eviction, expiry and scheduling change which messages wait, never who owns what.

`group-buckets` (N > 0) hashes group ids into N buckets and owns buckets instead of ids (a
bounded table; ids that share a bucket share an owner); 0 turns grouping off for the queue;
-1 (the default) keys by id. `group-first-key` names a header the first message of a group
delivered to its new owner carries (`true`), so the consumer can reset its state (Artemis'
`JMSXGroupFirstForConsumer`).

What this module owns: the table of owners (`Groups`), keyed by group key, each with the
time it was bound (`now_ms`, for the management listing) and the number of messages delivered
to the owner since. It knows nothing of queues or consumers beyond an owner's identity (any
object), so it imports nothing from the engine. The engine (`core/queue`) keeps a `Groups` once
a grouped message arrives (the guard that turns the queue's fast paths off: grouped queues
dispatch through `admits`, message by message); dispatch (`core/delivery.py`) asks `admits`
before handing a consumer a message and `taken` after; `core/delivery.py` calls `left` and
`joined` as consumers come and go.

Pure: no I/O, no clock (time is `now_ms`).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ringmq.core.message import Message

__all__ = [
    "GROUP_ID_HEADERS",
    "GROUP_SEQ_HEADERS",
    "Binding",
    "Groups",
    "closes_group",
    "group_id",
    "marked_first",
    "matcher",
]

GROUP_ID_HEADERS: Final = ("JMSXGroupID", "_AMQ_GROUP_ID")
"""Headers naming a message's group: JMS' name, then Artemis' core name."""
GROUP_SEQ_HEADERS: Final = ("JMSXGroupSeq", "_AMQ_GROUP_SEQUENCE")
"""Headers carrying a message's sequence in its group (negative: the group closes)."""


def group_id(headers: Mapping[str, Any] | None) -> str | None:
    """The group id among `headers` (None: the message is in no group; an empty id is none,
    as Artemis treats it)."""
    if not headers:
        return None
    for name in GROUP_ID_HEADERS:
        value = headers.get(name)
        if value is None:
            continue
        if isinstance(value, bytes | bytearray):
            value = bytes(value).decode("utf-8", "replace")
        text = str(value)
        return text or None
    return None


def closes_group(headers: Mapping[str, Any] | None) -> bool:
    """Whether the message's group sequence is negative (Artemis closes the group after it)."""
    if not headers:
        return False
    for name in GROUP_SEQ_HEADERS:
        value = headers.get(name)
        if value is None:
            continue
        if isinstance(value, bytes | bytearray | str):
            try:
                value = int(value)
            except ValueError:
                return False
        if type(value) is not int:
            return False
        # Read as a signed 32-bit int, as Artemis' getGroupSequence does (an AMQP 1.0
        # group-sequence is a uint: 0xFFFFFFFF is -1 there).
        value &= 0xFFFFFFFF
        return value >= 0x80000000
    return False


@dataclass(slots=True)
class Binding:
    """A group's owner.

    Attributes:
        owner: the consumer that takes the group's messages.
        group: the group id that bound it (with buckets, the first id seen in the bucket).
        since_ms: when it was bound.
        delivered: messages of the group delivered to the owner since.
    """

    owner: Any
    group: str
    since_ms: int
    delivered: int = 0


class Groups:
    """The owners of one queue's groups (see the module docstring)."""

    def __init__(self, buckets: int = -1, rebalance: bool = False, first_key: str | None = None):
        self.buckets = buckets
        self.rebalance = rebalance
        self.first_key = first_key
        self._owners: dict[str | int, Binding] = {}
        self._by_owner: dict[int, set[str | int]] = {}  # id(owner) -> its keys

    def configure(self, buckets: int, rebalance: bool, first_key: str | None) -> None:
        """New settings (a policy changed): a new bucket count re-keys, so every group loses
        its owner."""
        if buckets != self.buckets:
            self.reset()
        self.buckets, self.rebalance, self.first_key = buckets, rebalance, first_key

    @property
    def enabled(self) -> bool:
        """Grouping is on (`group-buckets` 0 turns it off)."""
        return self.buckets != 0

    def key(self, gid: str) -> str | int:
        """The table key of group `gid`: its bucket with `group-buckets`, else the id."""
        if self.buckets > 0:
            return zlib.crc32(gid.encode("utf-8", "surrogatepass")) % self.buckets
        return gid

    def owner_of(self, gid: str) -> Any:
        """The owner of group `gid`, None when it has none."""
        b = self._owners.get(self.key(gid))
        return None if b is None else b.owner

    def admits(self, owner: Any, headers: Mapping[str, Any] | None) -> bool:
        """Whether `owner` may take a message with `headers`: it is in no group, its group
        has no owner, or `owner` owns it."""
        if self.buckets == 0:
            return True
        gid = group_id(headers)
        if gid is None:
            return True
        b = self._owners.get(self.key(gid))
        return b is None or b.owner is owner

    def taken(self, owner: Any, headers: Mapping[str, Any] | None, now_ms: int) -> bool:
        """`owner` took a message with `headers` (after `admits` said it may): bind its group
        if it had no owner, count it, and close the group after a negative sequence. True
        when the message is the first of its group for this owner (`group-first-key`)."""
        if self.buckets == 0:
            return False
        gid = group_id(headers)
        if gid is None:
            return False
        key = self.key(gid)
        b = self._owners.get(key)
        first = b is None
        if b is None:
            b = self._owners[key] = Binding(owner, gid, now_ms)
            self._by_owner.setdefault(id(owner), set()).add(key)
        b.delivered += 1
        if closes_group(headers):
            self._unbind(key)
        return first

    def left(self, owner: Any) -> int:
        """`owner` left the queue: its groups have no owner now. Returns how many."""
        keys = self._by_owner.pop(id(owner), None)
        if not keys:
            return 0
        for key in keys:
            self._owners.pop(key, None)
        return len(keys)

    def joined(self) -> int:
        """A consumer joined: with `group-rebalance` every group loses its owner. Returns how
        many did."""
        return self.reset() if self.rebalance else 0

    def reset(self, gid: str | None = None) -> int:
        """Unbind group `gid` (None: every group); returns how many groups lost an owner."""
        if gid is None:
            n = len(self._owners)
            self._owners.clear()
            self._by_owner.clear()
            return n
        key = self.key(gid)
        if key not in self._owners:
            return 0
        self._unbind(key)
        return 1

    def _unbind(self, key: str | int) -> None:
        b = self._owners.pop(key)
        keys = self._by_owner.get(id(b.owner))
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_owner[id(b.owner)]

    def __len__(self) -> int:
        return len(self._owners)

    def bindings(self) -> list[tuple[str | int, Binding]]:
        """Every bound group: (key, binding), by key (ids sorted as text)."""
        return sorted(self._owners.items(), key=lambda kv: str(kv[0]))


def matcher(
    groups: Groups, owner: Any, also: Callable[[Message], bool] | None
) -> Callable[[Message], bool]:
    """The predicate dispatch hands `Queue.fetch_matching` for `owner` on a grouped queue:
    what `admits` allows it, and what `also` (its JMS selector, if any) matches."""
    admits = groups.admits
    if also is None:
        return lambda m: admits(owner, m.headers)
    return lambda m: admits(owner, m.headers) and also(m)


def marked_first(msg: Message, key: str) -> Message:
    """`msg` as delivered to the new owner of its group: a copy with header `key` = true
    (`group-first-key`); the queue keeps the original."""
    return msg.reheadered({**(msg.headers or {}), key: True})
