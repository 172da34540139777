"""The core's neutral effects as AMQP 0-9-1 frames.

The server applies a core effect to a 0-9-1 connection through `frame_of`: a confirm is
basic.ack / basic.nack, a returned publish basic.return (312 NO_ROUTE), a broker-side cancel
basic.cancel, a direct reply-to delivery basic.deliver under the reply-to routing key; a
broker-side close is connection.close with the condition's reply code. `Deliver` (the hot
path) is written by the server straight from its fields, and `Reply` / `ReplyContent` are
already this adapter's frames.
"""

from __future__ import annotations

from ringmq.adapters.amqp091.errors import REPLY_CODES
from ringmq.amqp import spec
from ringmq.amqp.reply_codes import ReplyCode
from ringmq.core.effects import (
    Bounce,
    CancelConsumer,
    Confirm,
    Deliver,
    DeliverReply,
    Effect,
    Reply,
    ReplyContent,
)
from ringmq.core.errors import Condition


def deliver_method(e: Deliver) -> spec.BasicDeliver:
    """The basic.deliver method of a `Deliver` effect."""
    m = e.message
    return spec.BasicDeliver(
        e.consumer_tag, e.delivery_id, e.redelivered, m.exchange, m.routing_key
    )


def reply_code(condition: Condition) -> ReplyCode:
    """The reply code of a broker-side close."""
    return REPLY_CODES[condition]


def frame_of(e: Effect) -> Reply | ReplyContent | None:
    """The 0-9-1 frame of a neutral effect that is one (None for the others: deliveries,
    closes, blocks, which the server writes itself; `Drained`, which 0-9-1 consumers never
    cause: they have no link credit)."""
    match e:
        case Confirm(conn_id=c, channel=ch, seq=seq, multiple=multiple, ok=ok):
            if ok:
                return Reply(c, ch, spec.BasicAck(delivery_tag=seq, multiple=multiple))
            return Reply(c, ch, spec.BasicNack(delivery_tag=seq, multiple=multiple))
        case Bounce(conn_id=c, channel=ch, reason=reason, message=msg):
            returned = spec.BasicReturn(
                reply_code=ReplyCode[reason],
                reply_text=reason,
                exchange=msg.exchange,
                routing_key=msg.routing_key,
            )
            return ReplyContent(c, ch, returned, msg)
        case CancelConsumer(conn_id=c, channel=ch, consumer_tag=tag):
            return Reply(c, ch, spec.BasicCancel(consumer_tag=tag, no_wait=True))
        case DeliverReply(conn_id=c, channel=ch, message=msg):
            deliver = spec.BasicDeliver(
                consumer_tag=e.consumer_tag,
                delivery_tag=e.delivery_id,
                redelivered=False,
                exchange=msg.exchange,
                routing_key=e.routing_key,
            )
            return ReplyContent(c, ch, deliver, msg)
        case Reply() | ReplyContent():
            return e
    return None


def as_frames(effects: list[Effect]) -> list[Effect]:
    """`effects` with every neutral effect that is a 0-9-1 frame replaced by that frame."""
    out: list[Effect] = []
    for e in effects:
        f = frame_of(e)
        out.append(e if f is None else f)
    return out
