"""Publishing a run of whole messages on one link: the receiving fast path's core calls.

The machine's fast path (`ringmq.amqp10.transfers`) hands over consecutive single-frame
messages of one link as one `MessagesReceived`. `publish_run` publishes them as `Links.message`
publishes each, on a plain link (a node with a fixed exchange and routing key: not a
transaction coordinator, not the anonymous relay, not `/exchanges/:x` with the subject as the
key): the link's exchange checked once for the run (`Publisher.exchange_for`, which nothing
in a run can change), then per message the size check, the 1.0 message form (`message.build`)
and the core's one publish pipeline (`Publisher.publish`), the unsettled ones' publish numbers
mapped to their delivery ids for the confirms. Refusals settle each message as `message`
does (`Links.refuse`). Any other link's runs go the general way, message by message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ringmq.adapters.amqp10 import message as m10
from ringmq.adapters.amqp10.errors import condition_of
from ringmq.amqp10 import conditions as c
from ringmq.amqp10.events import MessageReceived
from ringmq.amqp10.types import DecodeError
from ringmq.core.errors import BrokerError
from ringmq.core.published import UNROUTABLE
from ringmq.core.session import PublishMode

if TYPE_CHECKING:
    from ringmq.adapters.amqp10.links import Links
    from ringmq.adapters.amqp10.linkstate import InLink, LinkSession
    from ringmq.amqp10.events import MessagesReceived


def publish_run(links: Links, ev: MessagesReceived, now_ms: int) -> None:
    """Publish the messages of `ev` (module docstring): a plain link's as a run, any other
    link's as that many `MessageReceived` through `Links.message`."""
    ls = links.sessions.get(ev.channel)
    if ls is None:
        return
    link = ls.ins.get(ev.handle)
    if link is None:
        return
    if link.coordinator or link.node is None or link.routing_key is None:
        did = ev.first_id
        for payload in ev.payloads:
            one = MessageReceived(ev.channel, ev.handle, did, b"", ev.settled, payload, None, 0)
            links.message(one, now_ms)
            did += 1
        return
    _plain(links, ls, link, ev, now_ms)


def _plain(links: Links, ls: LinkSession, link: InLink, ev: MessagesReceived, now_ms: int) -> None:
    settled = ev.settled
    s = ls.core
    publisher = links.broker.publisher
    exchange = link.exchange
    rk = link.routing_key
    assert rk is not None
    did = ev.first_id - 1
    try:
        vh, x = publisher.exchange_for(s, exchange, rk)
    except BrokerError as exc:
        for _ in ev.payloads:
            did += 1
            links.refuse(ev.channel, did, settled, condition_of(exc.condition), exc.text)
        return
    max_size = publisher.max_message_size
    publish = publisher.publish
    build = m10.build
    confirms = ls.confirms
    if settled:  # at most once: no outcomes, no publish numbers (`Links.message`)
        s.mode = PublishMode.NORMAL
    try:
        for payload in ev.payloads:
            did += 1
            try:
                if len(payload) > max_size:
                    publisher.check_size(len(payload))
                msg = build(payload, exchange=exchange, routing_key=rk, now_ms=now_ms)
                outcome = publish(msg, session=s, vhost=vh, exchange=x, now_ms=now_ms).outcome
            except BrokerError as exc:
                links.refuse(ev.channel, did, settled, condition_of(exc.condition), exc.text)
                continue
            except DecodeError as exc:
                links.refuse(ev.channel, did, settled, c.DECODE_ERROR, str(exc))
                continue
            if settled:
                continue  # at most once: no outcome to send
            seq = s.publish_seq
            if outcome == UNROUTABLE:
                ls.unroutable.add(seq)
            confirms[seq] = did
    finally:
        s.mode = PublishMode.CONFIRM  # the session's resting mode
