"""Topic authorisation: RabbitMQ's `topic_permissions`, routing keys checked on topic exchanges.

Theory of operation: a topic permission names a user, a vhost, one exchange (by name, not a
pattern) and two regular expressions, `write` and `read`. On a topic exchange that has one for
the session's user, a publish's routing key must match `write`, and a binding's key (a queue or
exchange bound from it; an MQTT subscription's filter, a STOMP subscription's destination, as the
adapters map them to binding keys) must match `read`. As RabbitMQ's internal backend
(`rabbit_auth_backend_internal:check_topic_access`): no topic permission for the exchange grants
everything; an empty pattern matches only the empty key; patterns are searched, not anchored;
`{username}`, `{vhost}` (and for MQTT `{client_id}`) in a pattern stand for the connection's
values, substituted as they are (not escaped) before the pattern is compiled. A connection
logged in by another backend is checked by its own grant instead (`AuthDB.check_topic`, the one
entry of every caller): a token's routing-key scopes (`core.oauth`), LDAP's
`topic_access_query` (`core.ldapquery`); every refusal has the text `topic_refused` gives.

Cost: only the exchanges that need a check pay for one. `TopicPermissions.rule` says whether a
(user, vhost, exchange) has a permission; the publisher asks it once per session and exchange
and generation (`Publisher.exchange_for`), and the sessions whose exchange has none keep using
their cached write check, so a publish elsewhere does no work for this module. Compiled patterns
are cached per (permission, access, variables).

This module is pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from ringmq.core.errors import BrokerError, Condition

_VARIABLE = re.compile(r"\{(username|vhost|client_id)\}")


def _expand(pattern: str, variables: Mapping[str, str]) -> str:
    # `{name}` for each known variable (an unknown one stays as written, as in RabbitMQ)
    return _VARIABLE.sub(lambda m: variables.get(m.group(1), m.group(0)), pattern)


@dataclass(slots=True)
class TopicPermission:
    """One user's `write` and `read` regexes on one topic exchange of one vhost."""

    user: str
    vhost: str
    exchange: str
    write: str
    read: str
    _compiled: dict[tuple[str, tuple[tuple[str, str], ...]], re.Pattern[str]] = field(
        default_factory=dict, repr=False
    )

    def allows(self, access: str, routing_key: str, variables: Mapping[str, str]) -> bool:
        """True when `routing_key` matches the `access` ("write" or "read") pattern with
        `variables` substituted (an empty pattern matches only the empty key)."""
        key = (access, tuple(sorted(variables.items())))
        pattern = self._compiled.get(key)
        if pattern is None:
            source = self.write if access == "write" else self.read
            try:
                pattern = re.compile(_expand(source, variables) if source else "^$")
            except re.error:
                pattern = re.compile("(?!)")  # a substituted value broke it: matches nothing
            self._compiled[key] = pattern
        return pattern.search(routing_key) is not None


class TopicPermissions:
    """The topic permission table, by (user, vhost) then exchange."""

    def __init__(self) -> None:
        self._table: dict[tuple[str, str], dict[str, TopicPermission]] = {}

    def __iter__(self) -> Iterator[TopicPermission]:
        for by_exchange in self._table.values():
            yield from by_exchange.values()

    def __len__(self) -> int:
        return sum(len(v) for v in self._table.values())

    def set(self, user: str, vhost: str, exchange: str, write: str, read: str) -> None:
        """Create or replace the permission of `user` on `exchange` of `vhost`.

        Raises:
            ValueError: a pattern is not a valid regular expression (with the variables as
                written).
        """
        for what, pattern in (("write", write), ("read", read)):
            try:
                re.compile(_expand(pattern, {"username": "u", "vhost": "v", "client_id": "c"}))
            except re.error as exc:
                raise ValueError(f"invalid {what} regex {pattern!r}: {exc}") from None
        self._table.setdefault((user, vhost), {})[exchange] = TopicPermission(
            user, vhost, exchange, write, read
        )

    def clear(self, user: str, vhost: str, exchange: str | None = None) -> bool:
        """Remove `user`'s permission on `exchange` of `vhost` (every exchange when None);
        False when there was none."""
        by_exchange = self._table.get((user, vhost))
        if not by_exchange:
            return False
        if exchange is None:
            del self._table[(user, vhost)]
            return True
        found = by_exchange.pop(exchange, None) is not None
        if not by_exchange:
            del self._table[(user, vhost)]
        return found

    def forget_user(self, user: str) -> None:
        """Drop every permission of `user` (the user was deleted)."""
        for key in [k for k in self._table if k[0] == user]:
            del self._table[key]

    def forget_vhost(self, vhost: str) -> None:
        """Drop every permission in `vhost` (the vhost was deleted)."""
        for key in [k for k in self._table if k[1] == vhost]:
            del self._table[key]

    def rule(self, user: str, vhost: str, exchange: str) -> TopicPermission | None:
        """The permission that governs routing keys of `user` on `exchange`, or None (no
        check: everything is allowed)."""
        by_exchange = self._table.get((user, vhost))
        return None if by_exchange is None else by_exchange.get(exchange)


def check_topic(
    rule: TopicPermission, access: str, routing_key: str, variables: Mapping[str, str]
) -> None:
    """Raise ACCESS_REFUSED with RabbitMQ's text unless `rule` lets `routing_key` through.

    Args:
        rule: the permission `TopicPermissions.rule` found.
        access: "write" (publish) or "read" (bind, subscribe).
        routing_key: the publish's routing key or the binding's key, as AMQP sees it.
        variables: `username`, `vhost` and, for MQTT, `client_id`.
    """
    if not rule.allows(access, routing_key, variables):
        raise topic_refused(access, routing_key, rule.exchange, rule.vhost, rule.user)


def topic_refused(
    access: str, routing_key: str, exchange: str, vhost: str, user: str
) -> BrokerError:
    """ACCESS_REFUSED with RabbitMQ's text (`rabbit_access_control:check_topic_access`), for
    whichever backend refused."""
    return BrokerError(
        Condition.ACCESS_REFUSED,
        f"{access} access to topic '{routing_key}' in exchange '{exchange}' in vhost "
        f"'{vhost}' refused for user '{user}'",
    )


__all__ = ["TopicPermission", "TopicPermissions", "check_topic", "topic_refused"]
