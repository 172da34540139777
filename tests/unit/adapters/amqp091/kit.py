"""A tiny in-process client for driving the broker through its AMQP 0-9-1 adapter in tests,
and `StoreKit`, the same over a `Store` that can be restarted (no tests of its own).

Tests of the core itself use `tests/unit/core/corekit.py` (the core's own API) instead."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ringmq.adapters.amqp091 import Amqp091, as_frames, deliver_method
from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.amqp.reply_codes import AMQPError
from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Deliver, Effect, Reply, ReplyContent

PERSISTENT = BasicProperties(delivery_mode=2)
CAPS = {"capabilities": {"consumer_cancel_notify": True, "publisher_confirms": True}}


@dataclass
class Delivered:
    conn_id: int
    channel: int
    method: Any
    body: bytes
    properties_bin: bytes


class Kit:
    """Owns a broker, a fake clock and helpers that turn effects into plain values."""

    def __init__(self, config: BrokerConfig | None = None) -> None:
        self.broker = Broker(config or BrokerConfig(name_seed=7))
        self._amqp: Amqp091 | None = None
        self.now = 1_000_000
        self._next_conn = 1

    @property
    def amqp(self) -> Amqp091:
        """The AMQP 0-9-1 adapter over the current broker (subclasses replace the broker)."""
        if self._amqp is None or self._amqp.broker is not self.broker:
            self._amqp = Amqp091(self.broker)
        return self._amqp

    def connect(self, user: str = "guest", vhost: str = "/", caps: bool = True) -> int:
        conn_id = self._next_conn
        self._next_conn += 1
        self.broker.connection_opened(
            conn_id, user, vhost, "127.0.0.1:1", CAPS if caps else {}, self.now
        )
        return conn_id

    def channel(self, conn_id: int, ch: int = 1) -> tuple[int, int]:
        self.broker.channel_opened(conn_id, ch, self.now)
        return conn_id, ch

    def open(self) -> tuple[int, int]:
        return self.channel(self.connect())

    def call(
        self, chan: tuple[int, int], method: Any, content: RawContent | None = None
    ) -> list[Effect]:
        return as_frames(self.amqp.handle(chan[0], chan[1], method, content, self.now))

    def error(
        self, chan: tuple[int, int], method: Any, content: RawContent | None = None
    ) -> AMQPError:
        try:
            self.call(chan, method, content)
        except AMQPError as exc:
            return exc
        raise AssertionError(f"{method!r} did not raise")

    def publish(
        self,
        chan: tuple[int, int],
        routing_key: str,
        body: bytes = b"x",
        *,
        exchange: str = "",
        props: BasicProperties | None = None,
        mandatory: bool = False,
    ) -> list[Effect]:
        pb = encode_properties(props or BasicProperties())
        return self.call(
            chan,
            spec.BasicPublish(exchange=exchange, routing_key=routing_key, mandatory=mandatory),
            RawContent(60, len(body), pb, body),
        )

    def declare(self, chan: tuple[int, int], name: str, **kw: Any) -> list[Effect]:
        return self.call(chan, spec.QueueDeclare(queue=name, **kw))

    def consume(self, chan: tuple[int, int], queue: str, tag: str = "", **kw: Any) -> list[Effect]:
        return self.call(chan, spec.BasicConsume(queue=queue, consumer_tag=tag, **kw))

    def tick(self, ms: int) -> list[Effect]:
        self.now += ms
        return as_frames(self.broker.tick(self.now))


def methods(effects: list[Effect]) -> list[Any]:
    """The 0-9-1 methods of the effects that are frames, in order."""
    return [
        deliver_method(e) if isinstance(e, Deliver) else e.frame
        for e in as_frames(list(effects))
        if isinstance(e, Reply | ReplyContent | Deliver)
    ]


def delivered(effects: list[Effect]) -> list[Delivered]:
    """Content-bearing effects as Delivered records."""
    return [
        Delivered(
            e.conn_id,
            e.channel,
            deliver_method(e) if isinstance(e, Deliver) else e.frame,
            e.message.body,
            e.message.properties_bin,
        )
        for e in as_frames(list(effects))
        if isinstance(e, ReplyContent | Deliver)
    ]


def bodies(effects: list[Effect]) -> list[bytes]:
    return [d.body for d in delivered(effects) if isinstance(d.method, spec.BasicDeliver)]


def of_type(effects: list[Effect], kind: type) -> list[Any]:
    return [m for m in methods(effects) if isinstance(m, kind)]


class StoreKit(Kit):
    """A Kit whose broker runs over `store` and can be restarted over a reopened one."""

    def __init__(self, store: Any, config: BrokerConfig | None = None) -> None:
        super().__init__(config)
        self.config = config or BrokerConfig(name_seed=7)
        self.store = store
        self.broker = Broker(self.config, store=store, now_ms=self.now)

    def restart(self, store: Any) -> None:
        self.store = store
        self.broker = Broker(BrokerConfig(name_seed=7), store=store, now_ms=self.now)
        self._next_conn = 1
