"""RabbitMQ management JSON shapes for the port's records (pure functions, no I/O).

Field names are RabbitMQ's (`messages_ready`, `message_stats.publish_details.rate`, ...);
ringmq's own additions sit beside them (`messages_scheduled`, `messages_paged`, `ring_size`,
`effective_settings`, `counters`, `shard`). `message_stats` only lists counters with activity, as
RabbitMQ does. Timestamps are RabbitMQ's: `head_message_timestamp` in seconds,
`connected_at` in milliseconds.
"""

from __future__ import annotations

import base64
from typing import Any, Final

from ringmq.management.port import ConnectionInfo
from ringmq.management.rates import RateSampler
from ringmq.management.records import (
    BindingInfo,
    ChannelInfo,
    ConsumerInfo,
    ExchangeInfo,
    FetchedMessage,
    PermissionInfo,
    PolicyInfo,
    QueueInfo,
    ScheduledInfo,
    UserInfo,
)

STAT_NAMES: Final = (
    "publish",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "get_empty",
    "redeliver",
    "ack",
)
DEPTH_NAMES: Final = ("messages", "messages_ready", "messages_unacknowledged")


def queue_key(vhost: str, name: str) -> str:
    """The rate sampler's key for a queue."""
    return f"q\x00{vhost}\x00{name}"


def connection_key(name: str) -> str:
    """The rate sampler's key for a connection (its byte totals)."""
    return f"c\x00{name}"


def queue_totals(q: QueueInfo) -> dict[str, int]:
    """What the rate sampler records for a queue: its message_stats counters and depths."""
    c = q.counters
    return {
        "publish": c.publish,
        "deliver": c.deliver,
        "deliver_no_ack": c.deliver_no_ack,
        "get": c.get,
        "get_no_ack": c.get_no_ack,
        "get_empty": c.get_empty,
        "redeliver": c.redeliver,
        "ack": c.ack,
        "deliver_get": c.deliver + c.deliver_no_ack + c.get + c.get_no_ack,
        "messages": q.messages,
        "messages_ready": q.messages_ready,
        "messages_unacknowledged": q.messages_unacknowledged,
    }


def message_stats(totals: dict[str, int], rates: dict[str, float]) -> dict[str, Any]:
    """RabbitMQ's `message_stats`: each active counter with its `_details.rate`."""
    out: dict[str, Any] = {}
    for name in (*STAT_NAMES, "deliver_get"):
        value = totals.get(name, 0)
        if value:
            out[name] = value
            out[f"{name}_details"] = {"rate": rates.get(name, 0.0)}
    return out


def queue(q: QueueInfo, sampler: RateSampler, node: str) -> dict[str, Any]:
    totals = queue_totals(q)
    rates = sampler.rates(queue_key(q.vhost, q.name))
    c = q.counters
    ram_bytes = q.message_bytes - q.message_bytes_paged
    return {
        "name": q.name,
        "vhost": q.vhost,
        "durable": q.durable,
        "auto_delete": q.auto_delete,
        "exclusive": q.exclusive,
        "owner_pid_details": {"name": q.exclusive_owner} if q.exclusive_owner else None,
        "arguments": q.arguments,
        "policy": q.policy,
        "effective_policy_definition": {
            k: v for k, v in q.effective_settings.items() if not k.startswith("x-")
        }
        if q.policy
        else {},
        "node": node,
        # ringmq's: the shard the queue was placed on (x-queue-leader-locator)
        "shard": q.shard,
        "type": q.type,
        **({"stream": q.stream} if q.stream is not None else {}),
        # a quorum queue's group, as RabbitMQ lists it: here the node itself (replication is
        # per shard, docs/clustering.md)
        **({"leader": node, "members": [node]} if q.type == "quorum" else {}),
        "state": q.state,
        "messages": q.messages,
        "messages_ready": q.messages_ready,
        "messages_unacknowledged": q.messages_unacknowledged,
        "messages_scheduled": q.messages_scheduled,
        "messages_paged": q.messages_paged,
        "messages_details": {"rate": rates.get("messages", 0.0)},
        "messages_ready_details": {"rate": rates.get("messages_ready", 0.0)},
        "messages_unacknowledged_details": {"rate": rates.get("messages_unacknowledged", 0.0)},
        "messages_ram": q.messages - q.messages_paged,
        "messages_ready_ram": q.messages_ready - q.messages_paged,
        "messages_unacknowledged_ram": q.messages_unacknowledged,
        "messages_persistent": q.messages_persistent,
        "message_bytes": q.message_bytes,
        "message_bytes_ready": q.message_bytes_ready,
        "message_bytes_unacknowledged": q.message_bytes_unacknowledged,
        "message_bytes_scheduled": q.message_bytes_scheduled,
        "message_bytes_paged_out": q.message_bytes_paged,
        "message_bytes_ram": ram_bytes,
        "message_bytes_persistent": q.message_bytes_persistent,
        "head_message_timestamp": (
            q.head_message_timestamp_ms // 1000 if q.head_message_timestamp_ms else None
        ),
        "consumers": q.consumers,
        "consumer_capacity": 1.0 if q.consumers else 0.0,
        "consumer_utilisation": 1.0 if q.consumers else 0.0,
        "exclusive_consumer_tag": None,
        "ring_size": q.ring_size,
        "effective_settings": q.effective_settings,
        "counters": {
            "ring_evicted": c.ring_evicted,
            "lvq_replaced": c.lvq_replaced,
            "overflow_rejected": c.overflow_rejected,
            "expired": c.expired,
            "dead_lettered": dict(c.dead_lettered),
            "dead_lettered_total": sum(c.dead_lettered.values()),
        },
        "message_stats": message_stats(totals, rates),
    }


def add_samples(
    details: dict[str, Any], names: tuple[str, ...], points: list[tuple[int, dict[str, float]]]
) -> None:
    """Add RabbitMQ's `samples`, `avg` and `avg_rate` to the `<name>_details` in `details`.

    `points` come newest first (`RateSampler.series`); a sample is the counter's value at its
    timestamp (a length, or a running total), `avg` their mean and `avg_rate` the change per
    second from the oldest point to the newest. A counter absent from `details` (a
    message_stats counter still at 0) gets no details, as `message_stats` leaves it out.
    """
    span_s = (points[0][0] - points[-1][0]) / 1000 if points else 0
    for name in names:
        detail = details.get(f"{name}_details")
        if detail is None:
            continue
        values = [v.get(name, 0.0) for _, v in points]
        detail["samples"] = [
            {"sample": int(v), "timestamp": t} for (t, _), v in zip(points, values, strict=True)
        ]
        detail["avg"] = sum(values) / len(values) if values else 0.0
        detail["avg_rate"] = round(max(0.0, values[0] - values[-1]) / span_s, 2) if span_s else 0.0


def exchange(x: ExchangeInfo, sampler: RateSampler) -> dict[str, Any]:
    stats: dict[str, Any] = {}
    rates = sampler.rates(f"x\x00{x.vhost}\x00{x.name}")
    for name, value in (("publish_in", x.publish_in), ("publish_out", x.publish_out)):
        if value:
            stats[name] = value
            stats[f"{name}_details"] = {"rate": rates.get(name, 0.0)}
    return {
        "name": x.name,
        "vhost": x.vhost,
        "type": x.type,
        "durable": x.durable,
        "auto_delete": x.auto_delete,
        "internal": x.internal,
        "arguments": x.arguments,
        "user_who_performed_action": "rmq-internal",
        "message_stats": stats,
    }


def properties_key(routing_key: str, arguments: dict[str, Any]) -> str:
    """RabbitMQ's binding `properties_key`: "~" for an empty key, a hash suffix for args."""
    if not arguments:
        return routing_key if routing_key else "~"
    digest = 0
    for k, v in sorted(arguments.items()):
        for ch in f"{k}={v!r};":
            digest = (digest * 31 + ord(ch)) & 0xFFFFFFFF
    return f"{routing_key}~{digest:08x}"


def binding(b: BindingInfo) -> dict[str, Any]:
    return {
        "source": b.source,
        "vhost": b.vhost,
        "destination": b.destination,
        "destination_type": b.destination_type,
        "routing_key": b.routing_key,
        "arguments": b.arguments,
        "properties_key": properties_key(b.routing_key, b.arguments),
    }


def policy(p: PolicyInfo) -> dict[str, Any]:
    return {
        "vhost": p.vhost,
        "name": p.name,
        "pattern": p.pattern,
        "apply-to": p.apply_to,
        "definition": p.definition,
        "priority": p.priority,
    }


def user(u: UserInfo) -> dict[str, Any]:
    return {
        "name": u.name,
        "password_hash": u.password_hash,
        "hashing_algorithm": "rabbit_password_hashing_sha256",
        "tags": list(u.tags),
        "limits": {},
    }


def permission(p: PermissionInfo) -> dict[str, Any]:
    return {
        "user": p.user,
        "vhost": p.vhost,
        "configure": p.configure,
        "write": p.write,
        "read": p.read,
    }


def jsonable(value: Any) -> Any:
    """Client properties and headers as JSON (bytes become text or base64, tables recurse)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode("ascii")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def connection(c: ConnectionInfo, node: str) -> dict[str, Any]:
    return {
        "name": c.name,
        "node": node,
        "type": "network",
        "protocol": c.protocol,
        "user": c.user,
        "vhost": c.vhost,
        "host": c.host,
        "port": c.port,
        "peer_host": c.peer_host,
        "peer_port": c.peer_port,
        "state": c.state,
        "blocked_reason": c.blocked_reason,
        "channels": c.channels,
        "client_properties": jsonable(c.client_properties),
        "connected_at": c.connected_at_ms,
        "recv_oct": c.recv_oct,
        "send_oct": c.send_oct,
        "timeout": c.heartbeat_s,
        "frame_max": c.frame_max,
        "channel_max": c.channel_max,
        "auth_mechanism": c.auth_mechanism,
        "ssl": c.ssl,
    }


def connection_details(c: ConnectionInfo | None, conn_id: int) -> dict[str, Any]:
    if c is None:
        return {"name": f"conn-{conn_id}", "peer_host": "", "peer_port": 0}
    return {"name": c.name, "peer_host": c.peer_host, "peer_port": c.peer_port}


def channel(ch: ChannelInfo, conn: ConnectionInfo | None, node: str) -> dict[str, Any]:
    details = connection_details(conn, ch.conn_id)
    return {
        "name": f"{details['name']} ({ch.number})",
        "number": ch.number,
        "node": node,
        "connection_details": details,
        "user": conn.user if conn else "",
        "vhost": conn.vhost if conn else "",
        "consumer_count": ch.consumer_count,
        "messages_unacknowledged": ch.messages_unacknowledged,
        "prefetch_count": ch.prefetch_count,
        "global_prefetch_count": ch.global_prefetch_count,
        "confirm": ch.confirm,
        "transactional": ch.transactional,
        "state": ch.state,
    }


def consumer(c: ConsumerInfo, conn: ConnectionInfo | None) -> dict[str, Any]:
    details = connection_details(conn, c.conn_id)
    return {
        "consumer_tag": c.consumer_tag,
        "queue": {"name": c.queue, "vhost": c.vhost},
        "channel_details": {
            "name": f"{details['name']} ({c.channel})",
            "number": c.channel,
            "connection_name": details["name"],
            "peer_host": details["peer_host"],
            "peer_port": details["peer_port"],
            "user": conn.user if conn else "",
        },
        "ack_required": c.ack_required,
        "exclusive": c.exclusive,
        "prefetch_count": c.prefetch_count,
        "arguments": c.arguments,
        "active": c.active,
        "activity_status": "up" if c.active else "waiting",
    }


def payload(body: bytes, encoding: str, truncate: int | None) -> tuple[str, str]:
    """(payload, payload_encoding) as RabbitMQ's /get answers: "string" when UTF-8 allows."""
    if truncate is not None:
        body = body[:truncate]
    if encoding == "auto":
        try:
            return body.decode("utf-8"), "string"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(body).decode("ascii"), "base64"


def fetched(m: FetchedMessage, encoding: str, truncate: int | None) -> dict[str, Any]:
    text, enc = payload(m.body, encoding, truncate)
    return {
        "payload_bytes": len(m.body),
        "redelivered": m.redelivered,
        "exchange": m.exchange,
        "routing_key": m.routing_key,
        "message_count": m.message_count,
        "properties": jsonable(m.properties),
        "payload": text,
        "payload_encoding": enc,
    }


def scheduled(s: ScheduledInfo) -> dict[str, Any]:
    text, enc = payload(s.body, "auto", 4096)
    return {
        "seq": s.seq,
        "due_ms": s.due_ms,
        "routing_key": s.routing_key,
        "payload_bytes": len(s.body),
        "payload": text,
        "payload_encoding": enc,
        "properties": jsonable(s.properties),
    }
