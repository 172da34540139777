"""Queue types (`x-queue-type`): what a quorum queue refuses at declare and at consume.

Theory of operation: ringmq serves `classic` and `quorum` queues with one engine; a quorum
queue is a classic durable queue with RabbitMQ 4's quorum rules. Its settings rules (a delivery
limit of 20 by default, no `reject-publish-dlx`) are `ringmq.core.settings`'; the rules here
are about the declare itself and about consumers, with RabbitMQ's texts:

* a server-named quorum queue is refused before a name is made (`rabbit_channel`);
* a new quorum queue must be durable, not exclusive, not auto-delete, checked in RabbitMQ's
  order (`rabbit_quorum_queue:declare`'s auto-delete, exclusive, non-durable checks);
* a consumer on a channel with a global prefetch (basic.qos global=true) is refused with 540
  NOT_IMPLEMENTED, as RabbitMQ does (`consume/3` with an active limiter).

Redelivered messages of a quorum queue carry `x-delivery-count` (`ringmq.core.delivery`).
Replication is per shard, not per queue (docs/clustering.md): a quorum queue is as replicated
as a classic durable one, and on a single node not at all.

Pure; imports only the core's errors and message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ringmq.core.errors import BrokerError, Condition
from ringmq.core.message import Message

__all__ = [
    "QUORUM",
    "check_consume",
    "check_declare",
    "check_server_named",
    "counted",
    "queue_type",
]

QUORUM: Final = "quorum"


def queue_type(arguments: Mapping[str, Any]) -> str:
    """The `x-queue-type` a declare asks for ("classic" when absent or not a string)."""
    kind = arguments.get("x-queue-type")
    if isinstance(kind, bytes):
        kind = kind.decode(errors="replace")
    return kind if isinstance(kind, str) else "classic"


def check_server_named(arguments: Mapping[str, Any]) -> None:
    """Refuse a server-named (empty name) declare of a quorum queue."""
    if queue_type(arguments) == QUORUM:
        raise BrokerError(
            Condition.PRECONDITION_FAILED,
            "Cannot declare a server-named queue for type rabbit_quorum_queue",
        )


def check_declare(
    vhost: str,
    name: str,
    *,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    arguments: Mapping[str, Any],
) -> None:
    """Refuse a new quorum queue that is not durable, is exclusive or auto-delete."""
    if queue_type(arguments) != QUORUM:
        return
    for bad, prop in (
        (auto_delete, "auto-delete"),
        (exclusive, "exclusive-owner"),
        (not durable, "non-durable"),
    ):
        if bad:
            raise BrokerError(
                Condition.PRECONDITION_FAILED,
                f"invalid property '{prop}' for queue '{name}' in vhost '{vhost}'",
            )


def check_consume(kind: str, vhost: str, name: str, global_prefetch: int) -> None:
    """Refuse a consumer of a quorum queue on a channel with a global prefetch."""
    if kind == QUORUM and global_prefetch > 0:
        raise BrokerError(
            Condition.NOT_IMPLEMENTED,
            f"queue '{name}' in vhost '{vhost}' does not support global qos",
        )


def counted(message: Message, delivery_count: int) -> Message:
    """`message` as a quorum queue redelivers it: with `x-delivery-count`, the number of
    its earlier deliveries (RabbitMQ sets the header on redeliveries only)."""
    if delivery_count <= 1:
        return message
    headers = dict(message.headers or {})
    headers["x-delivery-count"] = delivery_count - 1
    return message.reheadered(headers)
