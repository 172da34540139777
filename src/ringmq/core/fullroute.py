"""Step 2 of the publish pipeline in full (`core/publish.py`): where a message goes when the
guard for the common message (no headers, no message id, not delayed) found no queue.

Theory of operation: `FullRoute.route` decides, in this order, whether a delayed exchange
holds the message until its `x-delay` is due (the exchange joins `holding`, which the broker's
tick visits), whether a reply-to consumer takes it (`amq.rabbitmq.reply-to.*`), and otherwise
which queues the vhost's bindings and alternate exchanges give, widened by the CC and BCC
headers (RabbitMQ sender-selected distribution) and narrowed by de-duplication on message id
and on Artemis' duplicate-id header. Nothing reached: counted unroutable, and handed back to a
`mandatory` publisher (`Bounce`).

Owns `holding`; reads the state's dedup windows and counters. Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Final

from ringmq.core.dedup import DUPL_ID_HEADER
from ringmq.core.delivery import REPLY_TO_PREFIX, Delivery
from ringmq.core.effects import Bounce
from ringmq.core.entities import QueueEntity
from ringmq.core.exchange import Exchange
from ringmq.core.message import Message
from ringmq.core.queue.scheduler import clamp_due
from ringmq.core.routing import ExchangeType
from ringmq.core.session import Session
from ringmq.core.state import State
from ringmq.core.texts import as_str
from ringmq.core.vhost import VHost

_DELAYED: Final = ExchangeType.DELAYED


class FullRoute:
    """Step 2 in full (see the module docstring)."""

    def __init__(self, state: State, delivery: Delivery) -> None:
        self.state = state
        self.delivery = delivery
        self.stats = state.stats
        self.holding: dict[int, tuple[VHost, Exchange]] = {}
        """Delayed exchanges holding messages, by id (the broker's tick releases them)."""

    def route(
        self,
        vh: VHost,
        x: Exchange,
        msg: Message,
        mandatory: bool,
        s: Session | None,
        now_ms: int,
    ) -> tuple[tuple[QueueEntity, ...], Message, bool | None]:
        # Step 2 in full: the queues `msg` goes to (and the message, BCC removed), or none:
        # then the third value says whether it was held and stored (a delayed exchange), or
        # answered (False: a reply-to consumer, or a duplicate), or None: unroutable (counted,
        # and returned to a mandatory publisher).
        rk = msg.routing_key
        hdrs = msg.headers
        if x.type is _DELAYED:
            delay = (hdrs or {}).get("x-delay")
            if isinstance(delay, int) and not isinstance(delay, bool) and delay > 0:
                due = clamp_due(now_ms + delay)
                held = x.hold(msg, due)
                self.holding[id(x)] = (vh, x)
                dur = self.state.durability
                return (), msg, dur is not None and dur.held(vh.name, x, held, msg, due)
        if not x.name and rk.startswith(REPLY_TO_PREFIX):
            if self.delivery.deliver_reply(rk, msg):
                return (), msg, False
            queues: tuple[QueueEntity, ...] = ()
        else:
            queues = vh.route(x, rk, hdrs)
            if hdrs and ("CC" in hdrs or "BCC" in hdrs):
                queues, msg = self.sender_selected(vh, x, msg, queues)
            if msg.message_id is not None and queues:
                # x-message-deduplication-window-ms (core/dedup.py): drop duplicates.
                queues = tuple(self.state.dedup.admit(vh.name, x, queues, msg.message_id, now_ms))
                if not queues:
                    return (), msg, False
            if hdrs and DUPL_ID_HEADER in hdrs and queues:  # Artemis duplicate detection
                address = x.name or rk
                if not self.state.dedup.admit_address(
                    vh.name, address, hdrs[DUPL_ID_HEADER], now_ms
                ):
                    return (), msg, False
        if not queues:
            stats = self.stats
            stats["unroutable"] += 1
            if s is not None:
                s.counts.unroutable += 1
                if mandatory:
                    stats["returned"] += 1
                    s.counts.returned += 1
                    self.state.out.append(Bounce(s.conn_id, s.channel, "NO_ROUTE", msg))
            return (), msg, None
        return queues, msg, None

    @staticmethod
    def sender_selected(
        vh: VHost, x: Exchange, msg: Message, queues: tuple[QueueEntity, ...]
    ) -> tuple[tuple[QueueEntity, ...], Message]:
        """RabbitMQ sender-selected distribution: also route with the keys in the CC and BCC
        headers (lists of strings); BCC is removed from the message before delivery."""
        headers = msg.headers or {}
        found = {id(q): q for q in queues}
        for name in ("CC", "BCC"):
            keys = headers.get(name)
            if not isinstance(keys, list):
                continue
            for key in keys:
                k = as_str(key)
                if k is not None:
                    for q in vh.route(x, k, headers):
                        found.setdefault(id(q), q)
        if "BCC" in headers:
            msg = msg.reheadered({k: v for k, v in headers.items() if k != "BCC"})
        return tuple(found.values()), msg
