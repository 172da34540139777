"""Single active consumer on streams: groups of stream-protocol subscriptions by name.

Theory of operation
-------------------
RabbitMQ's single active consumer on a stream (the `single-active-consumer` subscription
property with a consumer `name`): the subscriptions of one name on one stream form a group;
the first to join is active, the others wait in the order they joined; when the active one
leaves (unsubscribes, or its connection goes), the next one becomes active. A member is
(connection id, subscription id). `ActiveGroups` is that bookkeeping, one per broker (the
broker's connections share it); what "active" does to a subscription (the consumer update
exchange with its client, its credit) is the stream protocol adapter's.

Pure: no I/O, no clock.
"""

from __future__ import annotations

__all__ = ["ActiveGroups", "GroupKey", "Member"]

GroupKey = tuple[str, str, str]
"""(vhost, stream, consumer name)."""
Member = tuple[int, int]
"""(connection id, subscription id)."""


class ActiveGroups:
    """Every single-active-consumer group of a broker (see the module docstring)."""

    def __init__(self) -> None:
        self._groups: dict[GroupKey, list[Member]] = {}

    def join(self, key: GroupKey, member: Member) -> bool:
        """Add `member` last in group `key`; whether it is the active one."""
        group = self._groups.setdefault(key, [])
        group.append(member)
        return len(group) == 1

    def leave(self, key: GroupKey, member: Member) -> Member | None:
        """Remove `member` from group `key`; the member that becomes active (None: the active
        one stays, or the group is empty)."""
        group = self._groups.get(key)
        if group is None or member not in group:
            return None
        was_active = group[0] == member
        group.remove(member)
        if not group:
            del self._groups[key]
            return None
        return group[0] if was_active else None

    def members(self, key: GroupKey) -> list[Member]:
        """The members of `key`, the active one first."""
        return list(self._groups.get(key, ()))
