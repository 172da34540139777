"""Super streams over the stream protocol: a partitioned stream, as RabbitMQ makes it.

A super stream is a direct exchange (its name, argument `x-super-stream: true`) and one stream
queue per partition, each bound to it under its binding key with its position as the
binding's `x-stream-partition-order` argument. `create` declares all of it, `delete` removes
it, `partitions` lists the partitions in order (hash routing in the clients), `route` the
partitions a routing key reaches (key routing). Called by the handler inside a core call;
each returns the response frame. Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Any, Final

from ringmq.core.broker import Broker
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.exchange import Binding, Exchange
from ringmq.core.routing import QUEUE
from ringmq.core.session import Session
from ringmq.core.streamlog import STREAM
from ringmq.streamproto import codec as sp
from ringmq.streamproto import commands as sc
from ringmq.streamproto.codec import RESPONSE, Code, Key

ORDER: Final = "x-stream-partition-order"
SUPER_STREAM: Final = "x-super-stream"


def _super(s: Session, name: str) -> Exchange | None:
    x = s.vhost.exchanges.get(name)
    return x if x is not None and x.arguments.get(SUPER_STREAM) else None


def _partitions(x: Exchange, routing_key: str | None = None) -> list[str]:
    def order(b: Binding) -> Any:
        return b.arguments.get(ORDER, 0)

    found = [
        b
        for b in x.bindings.values()
        if b.dest[0] == QUEUE and (routing_key is None or b.routing_key == routing_key)
    ]
    return [b.dest[1] for b in sorted(found, key=order)]


def _names(key: Key, corr: int, code: Code, names: list[str]) -> bytes:
    w = sp.response(key, corr, code).count(len(names))
    for n in names:
        w.string(n)
    return w.frame(key | RESPONSE)


def partitions(s: Session, cmd: sc.Partitions) -> bytes:
    """The partitions of a super stream, in order."""
    x = _super(s, cmd.super_stream)
    if x is None:
        return _names(Key.PARTITIONS, cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST, [])
    return _names(Key.PARTITIONS, cmd.correlation_id, Code.OK, _partitions(x))


def route(s: Session, cmd: sc.Route) -> bytes:
    """The partitions a routing key reaches."""
    x = _super(s, cmd.super_stream)
    if x is None:
        return _names(Key.ROUTE, cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST, [])
    return _names(Key.ROUTE, cmd.correlation_id, Code.OK, _partitions(x, cmd.routing_key))


def create(
    b: Broker, s: Session, cmd: sc.CreateSuperStream, arguments: dict[str, Any], now_ms: int
) -> bytes:
    """Declare the exchange, the partitions and their bindings (`arguments`: the partitions'
    queue arguments, already read)."""
    corr = cmd.correlation_id
    if len(cmd.partitions) != len(cmd.binding_keys) or not cmd.partitions:
        raise BrokerError(Condition.PRECONDITION_FAILED, "partitions and binding keys differ")
    vh = s.vhost
    if cmd.name in vh.exchanges or any(p in vh.queues for p in cmd.partitions):
        return sp.simple_response(Key.CREATE_SUPER_STREAM, corr, Code.STREAM_ALREADY_EXISTS)
    b.exchanges.declare_exchange(
        vh, cmd.name, "direct", durable=True, auto_delete=False, internal=False,
        arguments={SUPER_STREAM: True}, grant=s,
    )  # fmt: skip
    for i, (name, key) in enumerate(zip(cmd.partitions, cmd.binding_keys, strict=True)):
        b.topology.declare_queue(
            s, name, durable=True, exclusive=False, auto_delete=False,
            arguments={"x-queue-type": STREAM, **arguments}, now_ms=now_ms,
        )  # fmt: skip
        b.topology.bind_queue(s, name, cmd.name, key, {ORDER: i})
    return sp.simple_response(Key.CREATE_SUPER_STREAM, corr, Code.OK)


def delete(b: Broker, s: Session, cmd: sc.DeleteSuperStream, now_ms: int) -> bytes:
    """Delete the partitions and the exchange."""
    x = _super(s, cmd.name)
    if x is None:
        return sp.simple_response(
            Key.DELETE_SUPER_STREAM, cmd.correlation_id, Code.STREAM_DOES_NOT_EXIST
        )
    for name in _partitions(x):
        b.topology.delete_named(s, name, now_ms)
    b.exchanges.delete_exchange(s.vhost, cmd.name, if_unused=False, grant=s)
    return sp.simple_response(Key.DELETE_SUPER_STREAM, cmd.correlation_id, Code.OK)
