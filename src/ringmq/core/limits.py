"""Vhost and user limits: RabbitMQ's `max-connections`, `max-queues` and `max-channels`.

Theory of operation
-------------------
`TenantLimits` holds the limits set through the management API (`/api/vhost-limits`,
`/api/user-limits`, as RabbitMQ has them): per vhost `max-connections` and `max-queues`, per
user `max-connections` and `max-channels`. A negative value means no limit (RabbitMQ stores
`-1`); 0 refuses every connection, queue or channel. The broker asks before it admits:

* a connection (`check_connection`, from `Broker.connection_opened`, whatever the protocol):
  the vhost's open connections, then the user's, against their limits; over one, a
  `BrokerError(NOT_ALLOWED)` with RabbitMQ's text, which each protocol turns into its refusal
  (0-9-1 `connection.close` 530, AMQP 1.0 open refused, STOMP ERROR, MQTT CONNACK);
* a channel (`channel_refusal`, from `Broker.channel_opened`): the user's open sessions (an
  AMQP 1.0 session is one, its transactions included); RabbitMQ closes the connection with
  NOT_ALLOWED;
* a new queue (`check_queue`, from `Topology.declare_queue`): the vhost's queues; a
  `BrokerError(PRECONDITION_FAILED)` with RabbitMQ's text.

Counting walks the open connections (or the vhost's queues) only when a limit is set, at
admission time, never per message. The limits are stored with their vhost's and user's
durable definitions (`core/defsync.py`, `core/recovery.py`) and dropped with them.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from ringmq.core.errors import BrokerError, Condition
from ringmq.core.session import Conn

__all__ = ["USER_LIMITS", "VHOST_LIMITS", "LimitError", "TenantLimits"]

VHOST_LIMITS: Final = ("max-connections", "max-queues")
USER_LIMITS: Final = ("max-connections", "max-channels")


class LimitError(ValueError):
    """An unknown limit name or a value that is not an integer (the API answers 400)."""


def _checked(kind: str, allowed: tuple[str, ...], name: str, value: object) -> int:
    if name not in allowed:
        raise LimitError(f"unknown {kind} limit {name!r}: one of {', '.join(allowed)}")
    if type(value) is not int:
        raise LimitError(f"{kind} limit {name!r} must be an integer, got {value!r}")
    return value


class TenantLimits:
    """Vhost and user limits (see the module docstring)."""

    def __init__(self) -> None:
        self.vhosts: dict[str, dict[str, int]] = {}
        self.users: dict[str, dict[str, int]] = {}

    # -- the tables --------------------------------------------------------------------------
    def set_vhost(self, vhost: str, name: str, value: object) -> None:
        """Set one limit of `vhost` (LimitError when invalid)."""
        self.vhosts.setdefault(vhost, {})[name] = _checked("vhost", VHOST_LIMITS, name, value)

    def clear_vhost(self, vhost: str, name: str) -> bool:
        """Remove one limit of `vhost`; whether it was set."""
        return _clear(self.vhosts, vhost, name)

    def set_user(self, user: str, name: str, value: object) -> None:
        """Set one limit of `user` (LimitError when invalid)."""
        self.users.setdefault(user, {})[name] = _checked("user", USER_LIMITS, name, value)

    def clear_user(self, user: str, name: str) -> bool:
        """Remove one limit of `user`; whether it was set."""
        return _clear(self.users, user, name)

    def forget_vhost(self, vhost: str) -> None:
        """The vhost was deleted: its limits go with it."""
        self.vhosts.pop(vhost, None)

    def forget_user(self, user: str) -> None:
        """The user was deleted: its limits go with it."""
        self.users.pop(user, None)

    # -- admission ---------------------------------------------------------------------------
    def check_connection(self, conns: Iterable[Conn], user: str, vhost: str) -> None:
        """Refuse a connection of `user` to `vhost` over a limit (BrokerError NOT_ALLOWED)."""
        vlimit = _limit(self.vhosts, vhost, "max-connections")
        ulimit = _limit(self.users, user, "max-connections")
        if vlimit is None and ulimit is None:
            return
        in_vhost = in_user = 0
        for c in conns:
            in_vhost += c.vhost == vhost
            in_user += c.user == user
        if vlimit is not None and in_vhost >= vlimit:
            raise BrokerError(
                Condition.NOT_ALLOWED,
                f"access to vhost '{vhost}' refused for user '{user}': "
                f"connection limit ({vlimit}) is reached",
            )
        if ulimit is not None and in_user >= ulimit:
            raise BrokerError(
                Condition.NOT_ALLOWED,
                f"connection refused for user '{user}': user connection limit ({ulimit}) "
                "is reached",
            )

    def channel_refusal(self, conns: Iterable[Conn], user: str) -> str | None:
        """The NOT_ALLOWED text refusing one more channel to `user`, or None."""
        limit = _limit(self.users, user, "max-channels")
        if limit is None:
            return None
        opened = sum(len(c.sessions) for c in conns if c.user == user)
        if opened < limit:
            return None
        return (
            f"number of channels opened for user '{user}' has reached the maximum allowed "
            f"user limit of ({limit})"
        )

    def check_queue(self, vhost: str, queues: int, name: str) -> None:
        """Refuse a new queue `name` in `vhost`, which has `queues` (PRECONDITION_FAILED)."""
        limit = _limit(self.vhosts, vhost, "max-queues")
        if limit is not None and queues >= limit:
            raise BrokerError(
                Condition.PRECONDITION_FAILED,
                f"cannot declare queue '{name}': queue limit in vhost '{vhost}' ({limit}) "
                "is reached",
            )


def _limit(table: Mapping[str, Mapping[str, int]], key: str, name: str) -> int | None:
    # The limit in force (a negative value is "no limit", as RabbitMQ's -1).
    value = table.get(key, {}).get(name)
    return value if value is not None and value >= 0 else None


def _clear(table: dict[str, dict[str, int]], key: str, name: str) -> bool:
    values = table.get(key)
    if values is None or name not in values:
        return False
    del values[name]
    if not values:
        del table[key]
    return True
