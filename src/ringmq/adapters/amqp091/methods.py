"""AMQP 0-9-1 methods as core calls: one handler per exchange, queue, basic, confirm and tx
method.

Theory of operation: each handler reads its method's fields, calls the core owner that does
the work (`Topology`, `Publisher`, `Delivery`, `Confirms`, `Transactions`) with plain values,
and appends the method's reply (`Reply`/`ReplyContent`) to the call's effects unless the
client asked for no-wait. Replies go out before the flush that follows the call, so they
precede the deliveries they enable (consume-ok before the first basic.deliver). Core errors
come back as `BrokerError`s; `Amqp091.handle` maps them to reply codes with this method's
class and method ids.

Handlers hold no state: what a channel remembers is the core's `Session`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ringmq.adapters.amqp091.message import build
from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.core.delivery import REPLY_TO_PREFIX, REPLY_TO_QUEUE
from ringmq.core.effects import Reply, ReplyContent
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.session import Session, SettleKind

if TYPE_CHECKING:
    from ringmq.core.broker import Broker

Handler = Callable[["Broker", Session, Any, RawContent | None, int], None]


def _reply(b: Broker, s: Session, method: object) -> None:
    b.calls.emit(Reply(s.conn_id, s.channel, method))


# ---------------------------------------------------------------------- exchanges
def exchange_declare(
    b: Broker, s: Session, m: spec.ExchangeDeclare, _c: RawContent | None, now_ms: int
) -> None:
    b.exchanges.declare_exchange(
        s.vhost,
        m.exchange,
        m.type,
        durable=m.durable,
        auto_delete=m.auto_delete,
        internal=m.internal,
        arguments=m.arguments,
        passive=m.passive,
        grant=s,
    )
    if not m.no_wait:
        _reply(b, s, spec.ExchangeDeclareOk())


def exchange_delete(
    b: Broker, s: Session, m: spec.ExchangeDelete, _c: RawContent | None, now_ms: int
) -> None:
    b.exchanges.delete_exchange(s.vhost, m.exchange, if_unused=m.if_unused, grant=s)
    if not m.no_wait:
        _reply(b, s, spec.ExchangeDeleteOk())


def exchange_bind(
    b: Broker, s: Session, m: spec.ExchangeBind, _c: RawContent | None, now_ms: int
) -> None:
    b.exchanges.bind_exchange(s.vhost, m.source, m.destination, m.routing_key, m.arguments, grant=s)
    if not m.no_wait:
        _reply(b, s, spec.ExchangeBindOk())


def exchange_unbind(
    b: Broker, s: Session, m: spec.ExchangeUnbind, _c: RawContent | None, now_ms: int
) -> None:
    b.exchanges.unbind_exchange(
        s.vhost, m.source, m.destination, m.routing_key, m.arguments, grant=s
    )
    if not m.no_wait:
        _reply(b, s, spec.ExchangeUnbindOk())


# ---------------------------------------------------------------------- queues
def queue_declare(
    b: Broker, s: Session, m: spec.QueueDeclare, _c: RawContent | None, now_ms: int
) -> None:
    name = m.queue
    topology = b.topology
    if m.passive:
        if name == REPLY_TO_QUEUE or name.startswith(REPLY_TO_PREFIX):
            if not m.no_wait:
                _reply(b, s, spec.QueueDeclareOk(queue=name))
            return
        q = topology.declare_queue_passive(s, name, now_ms)
    else:
        q = topology.declare_queue(
            s,
            name,
            durable=m.durable,
            exclusive=m.exclusive,
            auto_delete=m.auto_delete,
            arguments=m.arguments,
            now_ms=now_ms,
        )
    if not m.no_wait:
        _reply(
            b,
            s,
            spec.QueueDeclareOk(
                queue=q.name, message_count=q.message_count, consumer_count=q.consumer_count
            ),
        )


def queue_bind(
    b: Broker, s: Session, m: spec.QueueBind, _c: RawContent | None, now_ms: int
) -> None:
    b.topology.bind_queue(s, m.queue, m.exchange, m.routing_key, m.arguments)
    if not m.no_wait:
        _reply(b, s, spec.QueueBindOk())


def queue_unbind(
    b: Broker, s: Session, m: spec.QueueUnbind, _c: RawContent | None, now_ms: int
) -> None:
    b.topology.unbind_queue(s, m.queue, m.exchange, m.routing_key, m.arguments)
    _reply(b, s, spec.QueueUnbindOk())


def queue_purge(
    b: Broker, s: Session, m: spec.QueuePurge, _c: RawContent | None, now_ms: int
) -> None:
    count = b.topology.purge_for(s, m.queue)
    if not m.no_wait:
        _reply(b, s, spec.QueuePurgeOk(message_count=count))


def queue_delete(
    b: Broker, s: Session, m: spec.QueueDelete, _c: RawContent | None, now_ms: int
) -> None:
    topology = b.topology
    name, count = topology.delete_for(s, m.queue, if_unused=m.if_unused, if_empty=m.if_empty)
    # delete-ok goes before the basic.cancel of the queue's consumers, this channel's
    # included (RabbitMQ's order; py-amqp fails a delete whose reply comes after a cancel)
    if not m.no_wait:
        _reply(b, s, spec.QueueDeleteOk(message_count=count))
    if name:
        topology.delete_named(s, name, now_ms)


# ---------------------------------------------------------------------- consumers
def basic_qos(b: Broker, s: Session, m: spec.BasicQos, _c: RawContent | None, now_ms: int) -> None:
    if m.prefetch_size:
        raise BrokerError(Condition.NOT_IMPLEMENTED, f"prefetch_size!=0 ({m.prefetch_size})")
    _reply(b, s, spec.BasicQosOk())
    b.delivery.set_prefetch(s, m.prefetch_count, session_wide=m.global_)


def basic_consume(
    b: Broker, s: Session, m: spec.BasicConsume, _c: RawContent | None, now_ms: int
) -> None:
    tag = m.consumer_tag or b.state.gen_name("amq.ctag-")
    b.delivery.consume(
        s,
        m.queue,
        tag,
        no_ack=m.no_ack,
        exclusive=m.exclusive,
        arguments=dict(m.arguments or {}),
        now_ms=now_ms,
    )
    if not m.no_wait:
        # Appended after `consume` marked the queue: deliveries come at the flush, after it.
        _reply(b, s, spec.BasicConsumeOk(consumer_tag=tag))


def basic_cancel(
    b: Broker, s: Session, m: spec.BasicCancel, _c: RawContent | None, now_ms: int
) -> None:
    b.delivery.cancel(s, m.consumer_tag, now_ms)
    if not m.no_wait:
        _reply(b, s, spec.BasicCancelOk(consumer_tag=m.consumer_tag))


def basic_get(b: Broker, s: Session, m: spec.BasicGet, _c: RawContent | None, now_ms: int) -> None:
    got = b.delivery.get(s, m.queue, no_ack=m.no_ack, now_ms=now_ms)
    if got is None:
        _reply(b, s, spec.BasicGetEmpty())
        return
    msg = got.message
    b.calls.emit(
        ReplyContent(
            s.conn_id,
            s.channel,
            spec.BasicGetOk(
                delivery_tag=got.delivery_id,
                redelivered=got.redelivered,
                exchange=msg.exchange,
                routing_key=msg.routing_key,
                message_count=got.message_count,
            ),
            msg,
        )
    )


def basic_ack(b: Broker, s: Session, m: spec.BasicAck, _c: RawContent | None, now_ms: int) -> None:
    b.delivery.settle(s, m.delivery_tag, m.multiple, SettleKind.ACK, now_ms)


def basic_nack(
    b: Broker, s: Session, m: spec.BasicNack, _c: RawContent | None, now_ms: int
) -> None:
    kind = SettleKind.REQUEUE if m.requeue else SettleKind.REJECT
    b.delivery.settle(s, m.delivery_tag, m.multiple, kind, now_ms)


def basic_reject(
    b: Broker, s: Session, m: spec.BasicReject, _c: RawContent | None, now_ms: int
) -> None:
    kind = SettleKind.REQUEUE if m.requeue else SettleKind.REJECT
    b.delivery.settle(s, m.delivery_tag, False, kind, now_ms)


def basic_recover(b: Broker, s: Session, m: Any, _c: RawContent | None, now_ms: int) -> None:
    if not m.requeue:
        raise BrokerError(Condition.NOT_IMPLEMENTED, "requeue=false")
    b.delivery.recover(s, now_ms)
    if isinstance(m, spec.BasicRecover):
        _reply(b, s, spec.BasicRecoverOk())


# ---------------------------------------------------------------------- publish
def basic_publish(
    b: Broker, s: Session, m: spec.BasicPublish, content: RawContent | None, now_ms: int
) -> None:
    publisher = b.publisher
    vh, x = publisher.exchange_for(s, m.exchange, m.routing_key)
    if content is None:
        raise BrokerError(Condition.UNEXPECTED_FRAME, "basic.publish without content")
    publisher.check_size(len(content.body))
    if m.immediate:
        raise BrokerError(Condition.NOT_IMPLEMENTED, "immediate=true")
    msg = build(s, m.exchange, m.routing_key, content.properties_bin, content.body, now_ms)
    publisher.publish(msg, session=s, vhost=vh, exchange=x, now_ms=now_ms, mandatory=m.mandatory)


# ---------------------------------------------------------------------- confirm and tx
def confirm_select(
    b: Broker, s: Session, m: spec.ConfirmSelect, _c: RawContent | None, now_ms: int
) -> None:
    b.confirms.select(s)
    if not m.no_wait:
        _reply(b, s, spec.ConfirmSelectOk())


def tx_select(b: Broker, s: Session, m: spec.TxSelect, _c: RawContent | None, now_ms: int) -> None:
    b.transactions.select(s)
    _reply(b, s, spec.TxSelectOk())


def tx_commit(b: Broker, s: Session, m: spec.TxCommit, _c: RawContent | None, now_ms: int) -> None:
    b.transactions.commit(s, now_ms)
    _reply(b, s, spec.TxCommitOk())


def tx_rollback(
    b: Broker, s: Session, m: spec.TxRollback, _c: RawContent | None, now_ms: int
) -> None:
    b.transactions.rollback(s, now_ms)
    _reply(b, s, spec.TxRollbackOk())


HANDLERS: Final[dict[type, Handler]] = {
    spec.ExchangeDeclare: exchange_declare,
    spec.ExchangeDelete: exchange_delete,
    spec.ExchangeBind: exchange_bind,
    spec.ExchangeUnbind: exchange_unbind,
    spec.QueueDeclare: queue_declare,
    spec.QueueBind: queue_bind,
    spec.QueueUnbind: queue_unbind,
    spec.QueuePurge: queue_purge,
    spec.QueueDelete: queue_delete,
    spec.BasicQos: basic_qos,
    spec.BasicConsume: basic_consume,
    spec.BasicCancel: basic_cancel,
    spec.BasicPublish: basic_publish,
    spec.BasicGet: basic_get,
    spec.BasicAck: basic_ack,
    spec.BasicReject: basic_reject,
    spec.BasicNack: basic_nack,
    spec.BasicRecover: basic_recover,
    spec.BasicRecoverAsync: basic_recover,
    spec.ConfirmSelect: confirm_select,
    spec.TxSelect: tx_select,
    spec.TxCommit: tx_commit,
    spec.TxRollback: tx_rollback,
}
"""The handler of every method the core serves, by method class."""
