"""Management records read from the core's registry: the read side of `admin.CoreAdmin`.

Theory of operation: each function turns core objects (vhosts and their exchanges and
bindings, users, permissions, policies, connections and their sessions and consumers, messages
taken or scheduled) into the plain records of `management.records`, sorted as RabbitMQ lists
them. Only `CoreAdmin` calls them, with objects it looked up; queue records are
`queueinfo`'s. Message properties are described by the message's own form (`core.message`),
so a message of any protocol lists. Everything here reads; nothing changes the broker.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ringmq.core.auth import AuthDB, User
from ringmq.core.message import Message, amqp091_content, form_of
from ringmq.core.policies import Policy
from ringmq.core.routing import QUEUE
from ringmq.core.session import Conn, PublishMode
from ringmq.core.vhost import VHost
from ringmq.management.records import (
    BindingInfo,
    ChannelInfo,
    ConsumerInfo,
    ExchangeInfo,
    FetchedMessage,
    PermissionInfo,
    PolicyInfo,
    ScheduledInfo,
    TopicPermissionInfo,
    UserInfo,
)


def properties(msg: Message) -> dict[str, Any]:
    """The properties present in `msg`, by name (its form describes them)."""
    return form_of(msg).describe(msg.properties_bin)


def body(msg: Message) -> bytes:
    """The body as an AMQP 0-9-1 consumer gets it (an AMQP 1.0 message's data section; its
    other body sections encoded), what the API shows as the payload."""
    return bytes(msg.body) if not msg.form else amqp091_content(msg)[1]


def fetched(msg: Message, redelivered: bool, message_count: int) -> FetchedMessage:
    """A message taken or browsed, as /get answers it."""
    return FetchedMessage(
        exchange=msg.exchange,
        routing_key=msg.routing_key,
        body=body(msg),
        redelivered=redelivered,
        properties=properties(msg),
        message_count=message_count,
    )


def scheduled(seq: int, due_ms: int, msg: Message) -> ScheduledInfo:
    """A scheduled message of a queue."""
    return ScheduledInfo(
        seq=seq,
        due_ms=due_ms,
        routing_key=msg.routing_key,
        body=body(msg),
        properties=properties(msg),
    )


def user(u: User) -> UserInfo:
    """A user record (an empty hash: no password login)."""
    return UserInfo(
        name=u.name,
        tags=list(u.tags),
        password_hash=u.password_hash or "",
        loopback_only=u.loopback_only,
    )


def permissions(auth: AuthDB) -> list[PermissionInfo]:
    """Every permission, by user and vhost."""
    return [
        PermissionInfo(user=u, vhost=v, configure=p.configure, write=p.write, read=p.read)
        for (u, v), p in sorted(auth.permissions.items())
    ]


def topic_permissions(auth: AuthDB) -> list[TopicPermissionInfo]:
    """Every topic permission, by user, vhost and exchange."""
    return sorted(
        (TopicPermissionInfo(t.user, t.vhost, t.exchange, t.write, t.read) for t in auth.topics),
        key=lambda t: (t.user, t.vhost, t.exchange),
    )


def policy(p: Policy) -> PolicyInfo:
    """A policy record."""
    return PolicyInfo(
        vhost=p.vhost,
        name=p.name,
        pattern=p.pattern,
        definition=dict(p.definition),
        priority=p.priority,
        apply_to=str(p.apply_to),
    )


def exchanges(vhosts: Iterable[VHost]) -> list[ExchangeInfo]:
    """The exchanges of `vhosts`, by name."""
    return [
        ExchangeInfo(
            vhost=vh.name,
            name=x.name,
            type=x.type.value,
            durable=x.durable,
            auto_delete=x.auto_delete,
            internal=x.internal,
            arguments=dict(x.arguments),
        )
        for vh in vhosts
        for _, x in sorted(vh.exchanges.items())
    ]


def bindings(vhosts: Iterable[VHost]) -> list[BindingInfo]:
    """The bindings of `vhosts`: each queue's implicit default-exchange binding first, as
    RabbitMQ lists them, then each exchange's."""
    out: list[BindingInfo] = []
    for vh in vhosts:
        out.extend(
            BindingInfo(
                vhost=vh.name,
                source="",
                destination=qname,
                destination_type="queue",
                routing_key=qname,
                arguments={},
            )
            for qname in sorted(vh.queues)
        )
        out.extend(
            BindingInfo(
                vhost=vh.name,
                source=x.name,
                destination=bd.dest[1],
                destination_type="queue" if bd.dest[0] == QUEUE else "exchange",
                routing_key=bd.routing_key,
                arguments=dict(bd.arguments),
            )
            for _, x in sorted(vh.exchanges.items())
            for bd in x.bindings.values()
        )
    return out


def channels(conns: Iterable[Conn]) -> list[ChannelInfo]:
    """The open sessions of `conns`, by connection and number (an AMQP 1.0 session is one
    core session, its open transactions included)."""
    return [
        ChannelInfo(
            conn_id=c.conn_id,
            number=number,
            consumer_count=len(s.consumers),
            messages_unacknowledged=len(s.unacked),
            prefetch_count=s.prefetch_count,
            global_prefetch_count=s.global_prefetch,
            confirm=s.mode is PublishMode.CONFIRM,
            transactional=s.mode is PublishMode.TX or bool(s.txns),
            state="running",
        )
        for c in conns
        for number, s in sorted(c.sessions.items())
    ]


def consumers(conns: Iterable[Conn]) -> list[ConsumerInfo]:
    """The consumers of `conns`' sessions (`active`: not waiting behind a single active
    consumer)."""
    return [
        ConsumerInfo(
            conn_id=c.conn_id,
            channel=number,
            consumer_tag=tag,
            vhost=consumer.queue.vhost,
            queue=consumer.queue.name,
            ack_required=not consumer.no_ack,
            exclusive=consumer.exclusive,
            prefetch_count=consumer.prefetch,
            arguments=dict(consumer.arguments),
            active=not consumer.queue.consumers.single_active
            or consumer.queue.consumers.active is consumer,
        )
        for c in conns
        for number, s in sorted(c.sessions.items())
        for tag, consumer in s.consumers.items()
    ]
