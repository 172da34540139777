"""Queue lookups by name and queue bindings: `QueueBindings`, the base of `topology.Topology`.

Theory of operation
-------------------
`Topology` owns queues; this part of it owns finding a queue by name as a caller may use it and
binding queues to exchanges, with RabbitMQ's checks and texts. A client's calls take its session
(`queue_for`, `bind_queue`, `unbind_queue`: permissions, topic permissions, the exclusive lock,
and 0-9-1's empty name meaning the session's last declared queue); the management API and
config loading take the vhost (`bind`, `unbind`, `bind_destination`, `unbind_destination`) and
authorise their user themselves. Exchanges and their binding tables are `exchanges.Exchanges`';
a binding of a durable queue is recorded (`Exchanges.touch_binding`) to be written at the end of
the call; an auto-delete exchange goes with its last binding. The only state is the broker's
(`State`, the vhosts); this class holds none of its own.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ringmq.core.asks import stays_local
from ringmq.core.auth import Access
from ringmq.core.entities import QueueEntity
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.exchanges import Exchanges, not_default
from ringmq.core.routing import QUEUE
from ringmq.core.session import Session
from ringmq.core.state import State
from ringmq.core.vhost import VHost

_EXCLUSIVE_LOCKED: Final = (
    "cannot obtain exclusive access to locked queue '{q}' in vhost '{v}'. It could be originally "
    "declared on another connection or the exclusive property value does not match that of the "
    "original declaration."
)


def locked(q: str, vhost: str) -> BrokerError:
    """RESOURCE_LOCKED for a queue another connection owns exclusively."""
    return BrokerError(Condition.RESOURCE_LOCKED, _EXCLUSIVE_LOCKED.format(q=q, v=vhost))


class QueueBindings:
    """Queue lookups and bindings (see the module docstring)."""

    state: State
    exchanges: Exchanges

    # ------------------------------------------------------------------ lookups
    @staticmethod
    def queue(vh: VHost, name: str) -> QueueEntity:
        """Queue `name` of `vh` (NOT_FOUND when missing), whoever owns it."""
        q = vh.queues.get(name)
        if q is None:
            raise BrokerError(Condition.NOT_FOUND, f"no queue '{name}' in vhost '{vh.name}'")
        return q

    @staticmethod
    def queue_name(s: Session, name: str) -> str:
        """`name`, or for an empty name the last queue declared on the session (0-9-1 rule)."""
        if name:
            return name
        if not s.last_queue:
            raise BrokerError(Condition.NOT_FOUND, "no previously declared queue")
        return s.last_queue

    @staticmethod
    def queue_for(s: Session, name: str) -> QueueEntity:
        """Queue `name` as session `s` may use it (NOT_FOUND; RESOURCE_LOCKED when another
        connection owns it exclusively)."""
        vh = s.vhost
        q = vh.queues.get(name)
        if q is None:
            raise BrokerError(Condition.NOT_FOUND, f"no queue '{name}' in vhost '{vh.name}'")
        if q.exclusive_owner is not None and q.exclusive_owner != s.conn_id:
            raise locked(name, vh.name)
        return q

    @classmethod
    def local_queue_for(cls, s: Session, name: str) -> QueueEntity:
        """`queue_for` for what only the queue's owner can do (get, purge, delete): a copy of
        another shard's queue (`QueueEntity.owner`, core/forwarding.py) is refused."""
        q = cls.queue_for(s, name)
        if q.owner is not None:
            raise BrokerError(
                Condition.NOT_IMPLEMENTED,
                f"queue '{name}' in vhost '{q.vhost}' is owned by shard {q.owner}: "
                "getting from, purging or deleting another shard's queue is not available "
                "yet",
            )
        return q

    def bind_queue(
        self,
        s: Session,
        queue: str,
        exchange: str,
        routing_key: str,
        arguments: Mapping[str, Any] | None,
    ) -> None:
        """Bind `queue` to `exchange` for session `s` (an empty routing key with an empty
        queue name binds with the last declared queue's name, as 0-9-1 says)."""
        vh = s.vhost
        qname = self.queue_name(s, queue)
        routing_key = routing_key or (qname if not queue else "")
        not_default(exchange)
        auth = self.state.auth
        s.check(auth, Access.WRITE, "queue", qname)
        s.check(auth, Access.READ, "exchange", exchange)
        x = vh.exchanges.get(exchange)
        if x is not None:  # the binding key by the user's topic permission (core.topicauth)
            s.check_topic(auth, x, "read", routing_key)
        q = self.queue_for(s, qname)
        if (
            x is not None
            and not stays_local(q)
            and not x.has_binding((QUEUE, qname), routing_key, arguments)
        ):
            self.state.elsewhere(
                s,
                "queue.bind",
                vh.name,
                queue=qname,
                exchange=exchange,
                routing_key=routing_key,
                arguments=dict(arguments or {}),
            )
        self.bind(vh, exchange, qname, routing_key, arguments)

    def bind(
        self,
        vh: VHost,
        exchange: str,
        queue: str,
        routing_key: str,
        arguments: Mapping[str, Any] | None,
    ) -> None:
        """Bind queue `queue` to `exchange` in `vh` (no permission checks: `bind_queue` makes
        a session's; the management API and config loading authorise their user)."""
        not_default(exchange)
        q = self.queue(vh, queue)
        x = self.exchanges.exchange(vh, exchange)
        self.exchanges.bind(x, (QUEUE, q.name), routing_key, arguments)
        vh.invalidate()
        self.exchanges.touch_binding(
            vh, x, (QUEUE, q.name), routing_key, arguments, durable_dest=q.durable
        )

    def bind_destination(
        self,
        vh: VHost,
        source: str,
        destination_type: str,
        destination: str,
        routing_key: str,
        arguments: Mapping[str, Any] | None,
    ) -> None:
        """Bind a queue (`destination_type` "queue": `bind`) or an exchange ("exchange":
        `Exchanges.bind_exchange`) to exchange `source`, with no permission checks (the
        management API and config loading)."""
        if destination_type == "queue":
            self.bind(vh, source, destination, routing_key, arguments)
        elif destination_type == "exchange":
            self.exchanges.bind_exchange(vh, source, destination, routing_key, arguments)
        else:
            raise ValueError(
                f"destination_type must be queue or exchange, got {destination_type!r}"
            )

    def unbind_destination(
        self,
        vh: VHost,
        source: str,
        destination_type: str,
        destination: str,
        routing_key: str,
        arguments: Mapping[str, Any] | None,
    ) -> bool:
        """Remove a binding `bind_destination` made; False when it does not exist."""
        if destination_type == "queue":
            return self.unbind(vh, source, destination, routing_key, arguments)
        return self.exchanges.unbind_exchange(vh, source, destination, routing_key, arguments)

    def unbind_queue(
        self,
        s: Session,
        queue: str,
        exchange: str,
        routing_key: str,
        arguments: Mapping[str, Any] | None,
    ) -> None:
        """Remove a queue binding; a missing queue, exchange or binding is no error (RabbitMQ
        answers unbind-ok: the binding is gone either way). As there, exclusivity is checked
        only when the binding exists."""
        vh = s.vhost
        qname = self.queue_name(s, queue)
        not_default(exchange)
        auth = self.state.auth
        s.check(auth, Access.WRITE, "queue", qname)
        s.check(auth, Access.READ, "exchange", exchange)
        x = vh.exchanges.get(exchange)
        if x is not None:
            s.check_topic(auth, x, "read", routing_key)
        if (
            qname in vh.queues
            and x is not None
            and x.has_binding((QUEUE, qname), routing_key, arguments)
        ):
            q = self.queue_for(s, qname)  # 405 when another connection owns it exclusively
            if not stays_local(q):
                self.state.elsewhere(
                    s,
                    "queue.unbind",
                    vh.name,
                    queue=qname,
                    exchange=exchange,
                    routing_key=routing_key,
                    arguments=dict(arguments or {}),
                )
            self.unbind(vh, exchange, qname, routing_key, arguments)

    def unbind(
        self,
        vh: VHost,
        exchange: str,
        queue: str,
        routing_key: str,
        arguments: Mapping[str, Any] | None,
    ) -> bool:
        """Remove the binding of queue `queue` to `exchange` in `vh` (no checks); False when
        it does not exist. An auto-delete exchange goes with its last binding."""
        q = vh.queues.get(queue)
        x = vh.exchanges.get(exchange)
        dest = (QUEUE, queue)
        if q is None or x is None or not x.unbind(dest, routing_key, arguments):
            return False
        vh.invalidate()
        self.exchanges.touch_binding(vh, x, dest, routing_key, arguments, durable_dest=q.durable)
        self.exchanges.maybe_auto_delete_exchange(vh, x)
        return True
