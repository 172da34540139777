"""A broker driven through the core's own API, no protocol in between (no tests of its own).

`Core` opens connections and sessions, declares queues, publishes, gets, consumes and
settles with the calls adapters make (`Broker.call` around the owners' steps:
`Topology.declare_queue`, `Publisher.publish`, `Delivery.get`, ...), so a core test states
its case in the core's words: sessions, delivery ids, settle kinds, effects. Messages are
built as the core stores them (`Message`, empty properties).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import ringmq.adapters.amqp091.message  # noqa: F401 - registers the form `message` builds
from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig
from ringmq.core.delivery import Got
from ringmq.core.effects import Deliver, Effect
from ringmq.core.errors import BrokerError
from ringmq.core.message import Message
from ringmq.core.published import Published
from ringmq.core.queue import Queue
from ringmq.core.session import Session, SettleKind
from ringmq.core.topology import Declared

NO_PROPERTIES = b"\x00\x00"
"""The stored form of a message with no properties."""


def message(routing_key: str, body: bytes = b"x", *, exchange: str = "", **fields: Any) -> Message:
    """A message as the core stores it, no properties (`fields`: other `Message` fields,
    such as `headers`, `priority`, `persistent`)."""
    return Message(exchange, routing_key, NO_PROPERTIES, body, **fields)


class Core:
    """A broker, a fake clock and the core calls a test needs (see the module docstring).

    Each step is one call of the call protocol and returns the call's effects (`get` its
    `Got`); `published` is what the last `publish` did."""

    def __init__(self, config: BrokerConfig | None = None, store: Any = None) -> None:
        """`store`: the `Store` the broker writes its durable state to (None: none)."""
        self.now = 1_000_000
        self.config = config or BrokerConfig(name_seed=7)
        if store is None:
            self.broker = Broker(self.config)
        else:
            self.broker = Broker(self.config, store=store, now_ms=self.now)
        self.store = store
        self._next_conn = 1
        self.published: Published | None = None
        self.deleted = 0

    def restart(self, store: Any) -> None:
        """A new broker over `store` (the old one's, reopened), as after a restart; the
        connections start again from 1."""
        self.store = store
        self.broker = Broker(self.config, store=store, now_ms=self.now)
        self._next_conn = 1

    # ------------------------------------------------------------------ sessions
    def connect(
        self,
        user: str = "guest",
        vhost: str = "/",
        properties: dict[str, Any] | None = None,
        *,
        parks: bool = False,
    ) -> int:
        """A new connection (`properties`: the client's, such as its capabilities; `parks`:
        an adapter that parks a command shard 0 makes, as AMQP 0-9-1's)."""
        conn_id = self._next_conn
        self._next_conn += 1
        self.broker.connection_opened(
            conn_id, user, vhost, "127.0.0.1:1", properties or {}, self.now, parks=parks
        )
        return conn_id

    def session(self, conn_id: int, channel: int = 1) -> Session:
        assert self.broker.channel_opened(conn_id, channel, self.now) == []
        s = self.broker.session(conn_id, channel)
        assert s is not None
        return s

    def open(self, *, parks: bool = False) -> Session:
        """A session on a new connection (`parks`: see `connect`)."""
        return self.session(self.connect(parks=parks))

    # ------------------------------------------------------------------ calls
    def run(self, step: Callable[..., Any], *args: Any, **kw: Any) -> list[Effect]:
        """`step(*args, **kw)` as one core call; its effects."""
        with self.broker.call(self.now) as out:
            step(*args, **kw)
        return out

    def refused(self, step: Callable[..., Any], *args: Any, **kw: Any) -> BrokerError:
        """The `BrokerError` that `step(*args, **kw)`, run as one core call, raises."""
        with pytest.raises(BrokerError) as err:
            self.run(step, *args, **kw)
        return err.value

    def declare(
        self,
        s: Session,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
    ) -> Declared:
        """Declare queue `name` for `s`; what the declare answered (the name, the counts)."""
        with self.broker.call(self.now):
            return self.broker.topology.declare_queue(
                s,
                name,
                durable=durable,
                exclusive=exclusive,
                auto_delete=auto_delete,
                arguments=arguments,
                now_ms=self.now,
            )

    def exchange(self, s: Session, name: str, type_: str = "direct", **kw: Any) -> None:
        """Declare exchange `name` for `s` (`kw`: durable, auto_delete, internal, arguments)."""
        kw.setdefault("durable", False)
        kw.setdefault("auto_delete", False)
        kw.setdefault("internal", False)
        kw.setdefault("arguments", {})
        self.run(self.broker.exchanges.declare_exchange, s.vhost, name, type_, grant=s, **kw)

    def bind(
        self,
        s: Session,
        queue: str,
        exchange: str,
        routing_key: str = "",
        arguments: dict[str, Any] | None = None,
    ) -> None:
        self.run(self.broker.topology.bind_queue, s, queue, exchange, routing_key, arguments or {})

    def bind_exchange(
        self, s: Session, source: str, destination: str, routing_key: str = ""
    ) -> None:
        self.run(
            self.broker.exchanges.bind_exchange,
            s.vhost,
            source,
            destination,
            routing_key,
            {},
            grant=s,
        )

    def unbind(self, s: Session, queue: str, exchange: str, routing_key: str = "") -> None:
        self.run(self.broker.topology.unbind_queue, s, queue, exchange, routing_key, {})

    def delete(
        self, s: Session, queue: str, *, if_unused: bool = False, if_empty: bool = False
    ) -> list[Effect]:
        """Delete queue `queue` as its owner's command does (checked, then deleted); the
        number of messages it held is `deleted`."""
        topology = self.broker.topology
        with self.broker.call(self.now) as out:
            name, self.deleted = topology.delete_for(
                s, queue, if_unused=if_unused, if_empty=if_empty
            )
            if name:
                topology.delete_named(s, name, self.now)
        return out

    def publish(
        self,
        s: Session,
        routing_key: str,
        body: bytes = b"x",
        *,
        exchange: str = "",
        mandatory: bool = False,
        **fields: Any,
    ) -> list[Effect]:
        """Publish on `s` as one call (`fields`: see `message`); what it did is `published`."""
        publisher = self.broker.publisher
        with self.broker.call(self.now, publish=True) as out:
            vh, x = publisher.exchange_for(s, exchange)
            msg = message(routing_key, body, exchange=exchange, **fields)
            self.published = publisher.publish(
                msg, session=s, vhost=vh, exchange=x, now_ms=self.now, mandatory=mandatory
            )
        return out

    def get(self, s: Session, queue: str, *, no_ack: bool = False) -> Got | None:
        with self.broker.call(self.now):
            return self.broker.delivery.get(s, queue, no_ack=no_ack, now_ms=self.now)

    def consume(self, s: Session, queue: str, tag: str, **kw: Any) -> list[Effect]:
        kw.setdefault("no_ack", False)
        kw.setdefault("exclusive", False)
        kw.setdefault("arguments", {})
        return self.run(self.broker.delivery.consume, s, queue, tag, now_ms=self.now, **kw)

    def cancel(self, s: Session, tag: str) -> list[Effect]:
        return self.run(self.broker.delivery.cancel, s, tag, self.now)

    def prefetch(self, s: Session, count: int, *, session_wide: bool = False) -> list[Effect]:
        """Limit `s`'s unsettled deliveries per consumer (`session_wide`: over all of them)."""
        return self.run(self.broker.delivery.set_prefetch, s, count, session_wide=session_wide)

    def settle(
        self, s: Session, delivery_id: int, kind: SettleKind, *, multiple: bool = False
    ) -> list[Effect]:
        return self.run(self.broker.delivery.settle, s, delivery_id, multiple, kind, self.now)

    def tick(self, ms: int) -> list[Effect]:
        """Move the clock `ms` on and run the broker's timers."""
        self.now += ms
        return self.broker.tick(self.now)

    # ------------------------------------------------------------------ reading
    def queue(self, name: str, vhost: str = "/") -> Queue:
        return self.broker.vhosts[vhost].queues[name].queue

    def ready(self, name: str, vhost: str = "/") -> list[bytes]:
        """The bodies of the ready messages of queue `name`, in order."""
        return [m.body for m in self.queue(name, vhost).ready_messages()]


def bodies(effects: list[Effect]) -> list[bytes]:
    """The bodies of the `Deliver` effects, in order."""
    return [e.message.body for e in effects if isinstance(e, Deliver)]
